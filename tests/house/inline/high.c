/* SPDX-License-Identifier: Apache-2.0 */
/* The unit-graph check's self-test: the higher unit, which may call the lower one. */
#include "high.h"
#include "low.h"

int house_inline_high(int x)
{
    return house_inline_low(x) + 1;
}
