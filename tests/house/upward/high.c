/* SPDX-License-Identifier: Apache-2.0 */
/* The unit-graph check's own test: high calls nothing, so the upward edge (low.c) is no cycle. */
int gp_house_high(int n);

int gp_house_high(int n)
{
    return n + 1;
}
