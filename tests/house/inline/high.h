/* SPDX-License-Identifier: Apache-2.0 */
/* The unit-graph check's self-test: the higher unit's inline function, which leaves no symbol. */
#ifndef HOUSE_INLINE_HIGH_H
#define HOUSE_INLINE_HIGH_H

static inline int house_inline_high_twice(int x)
{
    return 2 * x;
}

int house_inline_high(int x);

#endif
