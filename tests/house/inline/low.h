/* SPDX-License-Identifier: Apache-2.0 */
/* The unit-graph check's self-test: the lower unit. */
#ifndef HOUSE_INLINE_LOW_H
#define HOUSE_INLINE_LOW_H

int house_inline_low(int x);

#endif
