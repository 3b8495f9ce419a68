/* SPDX-License-Identifier: Apache-2.0 */
/* The unit-graph check's self-test: the lower unit calls the higher one's inline function, a call
 * no object file shows. */
#include "high.h"
#include "low.h"

int house_inline_low(int x)
{
    return house_inline_high_twice(x);
}
