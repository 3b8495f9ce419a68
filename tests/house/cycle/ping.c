/* SPDX-License-Identifier: Apache-2.0 */
/* The unit-graph check's own test: ping and pong call each other, a cycle it must report. */
int gp_house_ping(int n);
int gp_house_pong(int n);

int gp_house_ping(int n)
{
    return n <= 0 ? 0 : gp_house_pong(n - 1);
}
