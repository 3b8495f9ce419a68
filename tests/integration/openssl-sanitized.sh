#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs the stock openssl binary with the sanitizer runtimes preloaded, so it can load a gpuprov.so
# built with ASan+UBSan (the runtime must come first); used by the cli tests of sanitized builds.
exec env LD_PRELOAD="$GPTEST_SANITIZER_PRELOAD" "$GPTEST_REAL_OPENSSL" "$@"
