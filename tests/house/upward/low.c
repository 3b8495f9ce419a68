/* SPDX-License-Identifier: Apache-2.0 */
/* The unit-graph check's own test: low, the lower unit of the table, calls up into high. */
int gp_house_low(int n);
int gp_house_high(int n);

int gp_house_low(int n)
{
    return n <= 0 ? 0 : gp_house_high(n - 1);
}
