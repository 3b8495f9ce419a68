/* SPDX-License-Identifier: Apache-2.0 */
/* The unit-graph check's own test: pong calls back into ping (see ping.c). */
int gp_house_ping(int n);
int gp_house_pong(int n);

int gp_house_pong(int n)
{
    return n <= 0 ? 1 : gp_house_ping(n - 1);
}
