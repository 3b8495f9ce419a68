#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes the minimal regression inputs of fuzz_evp_diff (tests/fuzz/regress/), one per finding.
"""usage: make_regress.py [OUT_DIR]   (default: tests/fuzz/regress beside this script)

Each input is the shortest call sequence that shows one finding (tests/fuzz/README.md): f* show an
open finding (GPUPROV_FUZZ_STRICT=1 makes them fail), b* a difference now matched, d* one gpuprov
now refuses on purpose (both must pass strictly).
Replay one with GPUPROV_FUZZ_TRACE=1 to read its calls and both providers' results.
"""
import importlib.util
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("make_corpus", os.path.join(here, "make_corpus.py"))
mc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mc)
K16, K32, K32b = bytes(range(16)), bytes(range(32)), bytes(range(100, 132))
IV12, IV12b, IV16 = bytes(range(12)), bytes(range(40, 52)), bytes(range(16))
S = mc.seq_file
# One chunk of n zero bytes with data flags fl (6: by EVP_Cipher).
def raw_data(n, fl): return bytes([mc.DATA, 0]) + mc.enc_len(n) + bytes([fl]) + mc.lit(bytes(n))
def final_cipher(): return bytes([mc.FINAL, 3])
# TLS1_AAD, then a 0-byte record: the AAD stays pending on both sides.
def pending(payload=10): return bytes([mc.TLS_RECORD, 0x1c]) + mc.enc_len(payload) + bytes([1, 0]) + mc.lit(b"")
def params(which, v): return bytes([mc.PARAMS, which, v])
def settag_lenonly(): return bytes([mc.SET_TAG, 0xf0]) + mc.lit(bytes(6))
seqs = {
 "b9-gcm-empty-cipher-no-key": S("AES-128-GCM", mc.cipher_init(1), raw_data(0, 6)),
 "b10-ccp-taglen-unset": S("ChaCha20-Poly1305", mc.cipher_init(0, key=K32, iv=IV12), mc.get_state()),
 "b10-gcm-taglen-after-enc-final": S("AES-128-GCM", mc.cipher_init(0, key=K16, iv=IV12), mc.set_tag(bytes(4), 4),
                                     mc.reinit(1), mc.final(), mc.get_state()),
 "b7-gcm-taglen-only": S("AES-128-GCM", mc.cipher_init(0, key=K16, iv=IV12), settag_lenonly()),
 "d4-gcm-ivlen-stale-iv": S("AES-128-GCM", mc.cipher_init(1, key=K16, iv=IV12), mc.set_ivlen(16), mc.get_state()),
 "d5-gcm-refused-tls-aad": S("AES-128-GCM", mc.cipher_init(1, key=K16), mc.tls_fixed_whole(IV12),
                             bytes([mc.TLS_RECORD, 0xe0]) + mc.enc_len(10) + bytes([1, 0, 0]) + mc.lit(bytes(34))),
 "d5-ccp-failed-tls-record-then-fixed": S("ChaCha20-Poly1305", mc.cipher_init(1, key=K32, iv=IV12),
                               bytes([mc.TLS_RECORD, 0x1c]) + mc.enc_len(10) + bytes([1, 5]) + mc.lit(bytes(5)),
                               mc.tls_fixed(IV12b), mc.final()),
 "b3-gcm-short-random-iv": S("AES-128-GCM", mc.cipher_init(1, key=K16), mc.set_ivlen(8), mc.final()),
 "b8-ccp-cipher-final": S("ChaCha20-Poly1305", mc.cipher_init(1, key=K32, iv=IV12), mc.data(bytes(10)), final_cipher(),
                          mc.get_tag()),
 "d8-gcm-rekey-midmsg": S("AES-128-GCM", mc.cipher_init(1, key=K16, iv=IV12), mc.data(bytes(16)),
                          mc.reinit(None, key=bytes(range(50, 66))), mc.data(bytes(16))),
 "d9-ccp-fixed-midmsg": S("ChaCha20-Poly1305", mc.cipher_init(1, key=K32, iv=IV12), mc.data(bytes(10)),
                          mc.tls_fixed(IV12b), mc.data(bytes(10))),
 "b11-chacha20-reinit-midblock": S("ChaCha20", mc.cipher_init(1, key=K32, iv=IV16), mc.data(bytes(75)), mc.reinit(None),
                                   mc.data(bytes(41))),
 "d11-ccp-direction-flip": S("ChaCha20-Poly1305", mc.cipher_init(0, key=K32, iv=IV12), mc.data(bytes(20)), mc.reinit(1),
                             mc.final(), mc.get_tag()),
 "d12-ctr-tls-mac": S("AES-128-CTR", mc.cipher_init(0, key=K16, iv=IV16), params(1, 0), params(2, 16), mc.data(bytes(40))),
 "d13-ccp-aad-in-tls-mode": S("ChaCha20-Poly1305", mc.cipher_init(0, key=K32, iv=IV12), pending(), mc.aad(bytes(5))),
 "d14-ccp-rekey-tls-pending": S("ChaCha20-Poly1305", mc.cipher_init(1, key=K32, iv=IV12), pending(),
                                mc.reinit(None, key=K32b), mc.final()),
 "b12-gcm-iv-reinit-tls-pending": S("AES-128-GCM", mc.cipher_init(0, key=K16, iv=IV12), pending(), mc.reinit(None, iv=IV12b),
                                    mc.data(bytes(70))),
 "b13-gcm-final-tls-pending": S("AES-128-GCM", mc.cipher_init(0, key=K16), pending(), mc.final(), mc.get_state()),
 "fr2-gcm-refused-settag-clobbers-default-tag": S("AES-128-GCM", mc.cipher_init(1, key=K16, iv=IV12), mc.data(bytes(16)),
                                                  mc.final(), mc.set_tag(bytes(16)), mc.get_tag()),
 "fr6-gcm-refused-settag-clobbers-tls-aad": S("AES-128-GCM", mc.cipher_init(1, key=K16, iv=IV12), mc.tls_fixed_whole(IV12),
                                              pending(), mc.set_tag(bytes([0x95]), 1), mc.data(bytes(40), inplace=True)),
 "fr6-gcm-settag-dec-clobbers-tls-aad": S("AES-128-GCM", mc.cipher_init(0, key=K16, iv=IV12), pending(),
                                         mc.set_tag(bytes([0x27] * 6), 6), mc.reinit(1), mc.tls_fixed_whole(IV12),
                                         mc.data(bytes(40), inplace=True)),
 "fr7-gcm-enc-final-clobbers-expected-tag": S("AES-128-GCM", mc.cipher_init(0, key=K16, iv=IV12), mc.set_tag(bytes(16)),
                                             mc.reinit(1, iv=IV12), mc.final(), mc.reinit(0, iv=IV12), mc.final()),
 "fr7-ccp-enc-final-clobbers-expected-tag": S("ChaCha20-Poly1305", mc.cipher_init(0, key=K32, iv=IV12), mc.set_tag(bytes(16)),
                                             mc.reinit(1, iv=IV12), mc.final(), mc.reinit(0, iv=IV12), mc.final()),
 "b4-lane-tls-aad-before-fixed": S("AES-128-GCM", mc.cipher_init(0), pending(129), mc.reinit(None, key=K16),
                                  mc.tls_fixed_whole(IV12), raw_data(46, 7)),
 "d14-ccp-rekey-tls-pending-record": S("ChaCha20-Poly1305", mc.cipher_init(1, key=K32, iv=IV12), pending(),
                                      mc.reinit(None, key=K32b), mc.data(bytes(26), inplace=True)),
 "b1-cpu-copy-after-rekey": S("AES-128-GCM", mc.cipher_init(1, key=K16, iv=IV12), mc.data(bytes(50)),
                              mc.reinit(None, key=bytes(range(50, 66)), iv=IV12), mc.copy(), mc.data(bytes(50))),
 "d10-chacha20-rekey-midstream": S("ChaCha20", mc.cipher_init(1, key=K32, iv=IV16), mc.data(bytes(75)),
                                  mc.reinit(None, key=K32b), mc.data(bytes(41))),
 "b14-ccp-tls-record-wrong-length-stays": S("ChaCha20-Poly1305", mc.cipher_init(1, key=K32, iv=IV12), pending(),
                                            mc.data(bytes(5)), mc.data(bytes(26), inplace=True), mc.get_state()),
 "d11-gcm-direction-flip": S("AES-128-GCM", mc.cipher_init(1, key=K16, iv=IV12), mc.data(bytes(20)), mc.reinit(0),
                             mc.data(bytes(20))),
 "b15-ccp-lane-refused-tls-aad-keeps-message": S("ChaCha20-Poly1305", mc.cipher_init(0, key=K32), mc.tls_fixed(IV12),
                                                  mc.data(bytes(108)),
                                                  bytes([mc.TLS_RECORD, 0xe0]) + mc.enc_len(10) + bytes([1, 0, 0])
                                                  + mc.lit(bytes(26))),
 "d4-gcm-tls-record-after-ivlen-change": S("AES-128-GCM", mc.cipher_init(1, key=K16), mc.tls_fixed_whole(IV12),
                                          mc.set_ivlen(16), mc.tls_record(10, 1, body=bytes(34))),
 "b16-gcm-dropped-iv-record-taglen": S("AES-128-GCM", mc.cipher_init(0, key=K16), mc.tls_fixed_whole(IV12),
                                      mc.set_tag(bytes(10), 10), mc.set_ivlen(16), mc.tls_record(10, 1, body=bytes(34)),
                                      mc.get_state()),
 "b17-gcm-refused-aad-decrypt-record-iv": S("AES-128-GCM", mc.cipher_init(0, key=K16), mc.tls_fixed_whole(IV12),
                                           bytes([mc.TLS_RECORD, 0xe0]) + mc.enc_len(10) + bytes([1, 3, 0])
                                           + mc.lit(bytes(range(1, 35))), mc.get_state()),
 "b18-ccp-lane-taglen-set-before-open": S("ChaCha20-Poly1305", mc.cipher_init(1), settag_lenonly(),
                                         mc.reinit(None, key=K32, iv=IV12), mc.data(bytes(10)), mc.final(),
                                         mc.get_state()),
 "d4-gcm-lane-ivlen-after-final-iv-read": S("AES-128-GCM", mc.cipher_init(1, key=K16), mc.final(), mc.set_ivlen(2),
                                           mc.reinit(None, iv=bytes([0x87, 0x64])), mc.final(), mc.set_ivlen(3),
                                           mc.get_state()),
 "fr2-ccp-settag-dec-clobbers-computed-tag": S("ChaCha20-Poly1305", mc.cipher_init(1, key=K32, iv=IV12),
                                              mc.data(bytes(10)), mc.final(), mc.get_tag(), mc.reinit(0),
                                              mc.set_tag(bytes(16)), mc.reinit(1), mc.get_tag()),
 "b2-gcm-tls-record-short-iv": S("AES-128-GCM", mc.cipher_init(1, key=K16), mc.tls_fixed_whole(IV12), mc.set_ivlen(2),
                                 mc.tls_record(10, 1, body=bytes(34))),
}
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "regress")
os.makedirs(out, exist_ok=True)
for n, b in seqs.items():
    with open(os.path.join(out, n), "wb") as f:
        f.write(b)
print("make_regress: %d inputs in %s" % (len(seqs), out))
