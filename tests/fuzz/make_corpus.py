#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes the seed corpus of fuzz_evp_diff (tests/fuzz/corpus/): vectors turned into encoded call sequences.
"""usage: make_corpus.py VECTORS_DIR OUT_DIR

VECTORS_DIR holds wycheproof/aes_gcm_test.json, wycheproof/chacha20_poly1305_test.json and
rfc8439_vectors.json (../shared/vectors). Each seed is one sequence in fuzz_evp_diff's input
format (tests/fuzz/README.md): a known-answer message encrypted, then decrypted from the replayed
output with the vector's tag (so the verified path is reached from the first run), TLS 1.2 records
sent and received, and the misuse cases gpuprov refuses on purpose. The encoder below mirrors the
decoder in fuzz_evp_diff.c; keep them in step.
"""
import json
import os
import sys

ALGS = ["AES-128-CTR", "AES-192-CTR", "AES-256-CTR", "AES-128-GCM", "AES-192-GCM", "AES-256-GCM",
        "ChaCha20-Poly1305", "ChaCha20"]
(CIPHER_INIT, REINIT, SET_IVLEN, AAD, DATA, FINAL, GET_TAG, SET_TAG, COPY, TLS_FIXED, TLS_RECORD,
 GET_STATE, DATA1, PARAMS, NEW_CTX) = range(15)
REPLAY = b"\x02"          # value source 2: the last key/IV/tag, or the previous message's output
KEEP_ENC = 3              # REINIT's direction byte: 3 % 4 == 3 means -1 (EVP keeps it)


def lit(b):
    """A literal value: source 0, then the bytes."""
    return b"\x00" + b


def enc_len(n):
    """rd_len: < 240 in one byte, else 0xf0 + 16 bits (<= 4096) or 0xfe + 16 bits (<= 65535)."""
    if n < 0xf0:
        return bytes([n])
    if n <= 4096:
        return bytes([0xf0, n & 0xff, n >> 8])
    assert n <= 0xffff
    return bytes([0xfe, n & 0xff, n >> 8])


def cipher_init(enc, key=None, iv=None):
    fl = (1 if enc else 0) | (2 if key is not None else 0) | (4 if iv is not None else 0)
    out = bytes([CIPHER_INIT, fl])
    if key is not None:
        out += key if key == REPLAY else lit(key)
    if iv is not None:
        out += iv if iv == REPLAY else lit(iv)
    return out


def reinit(enc, key=None, iv=None):
    """enc: 0, 1 or None (keep)."""
    fl = (1 if key is not None else 0) | (2 if iv is not None else 0)
    out = bytes([REINIT, fl, KEEP_ENC if enc is None else enc])
    if key is not None:
        out += key if key == REPLAY else lit(key)
    if iv is not None:
        out += iv if iv == REPLAY else lit(iv)
    return out


def set_ivlen(n, by_ctrl=False):
    assert 1 <= n <= 128
    return bytes([SET_IVLEN, 1 if by_ctrl else 0, n])


def aad(data, pieces=1):
    """AAD in up to 4 chunks; each chunk: 0x00 + (len % 64) for short ones, 0xc0 + rd_len otherwise."""
    chunks = split(data, pieces)
    out = bytes([AAD, len(chunks) - 1])
    for c in chunks:
        out += (bytes([0x00, len(c)]) if len(c) < 64 else b"\xc0" + enc_len(len(c))) + lit(c)
    return out


def data(payload, pieces=1, inplace=False, replay=False, offset=0):
    """Data in up to 4 chunks by EVP_CipherUpdate; `replay` takes the bytes from the previous output."""
    chunks = split(payload, pieces)
    out = bytes([DATA, len(chunks) - 1])
    for c in chunks:
        fl = (1 if inplace else 0) | (offset % 16) << 3
        out += enc_len(len(c)) + bytes([fl]) + (REPLAY if replay else lit(c))
    return out


def split(b, pieces):
    pieces = max(1, min(4, pieces, max(1, len(b))))
    cut = [len(b) * i // pieces for i in range(pieces + 1)]
    return [b[cut[i]:cut[i + 1]] for i in range(pieces)]


def final():
    return bytes([FINAL, 0])


def get_tag(n=16):
    return bytes([GET_TAG, n])


def set_tag(tag=None, n=16):
    """The given tag, or (None) the last one read."""
    return bytes([SET_TAG, n]) + (REPLAY if tag is None else lit(tag))


def copy(diverge=None):
    """EVP_CIPHER_CTX_copy; `diverge`: bytes for one update on the original before it is freed."""
    if diverge is None:
        return bytes([COPY, 0])
    return bytes([COPY, 1]) + enc_len(len(diverge)) + b"\x00" + lit(diverge)


def tls_fixed_whole(iv):
    return bytes([TLS_FIXED, 2]) + lit(iv)


def tls_fixed(fixed):
    """GCM: a 4-byte salt (mode 0); ChaCha20-Poly1305: the 12-byte IV (mode 0)."""
    return bytes([TLS_FIXED, 0]) + lit(fixed)


def tls_record(payload_len, seq, replay=False, body=b""):
    """One record: flags 0 (EVP_CipherUpdate, in place, the libssl length in the AAD)."""
    out = bytes([TLS_RECORD, 0]) + enc_len(payload_len) + bytes([seq])
    return out + (REPLAY if replay else lit(body))


def seq_file(alg, *ops):
    return bytes([ALGS.index(alg)]) + b"".join(ops)


def gcm_name(keysize):
    return {128: "AES-128-GCM", 192: "AES-192-GCM", 256: "AES-256-GCM"}[keysize]


def aead_vector(alg, t, ivlen_default, pieces):
    """Encrypt the vector's message (its tag must match), then decrypt the replayed output with
    the vector's tag; an invalid vector decrypts its own ciphertext and tag, and Final fails."""
    key, iv = bytes.fromhex(t["key"]), bytes.fromhex(t["iv"])
    a, msg = bytes.fromhex(t["aad"]), bytes.fromhex(t["msg"])
    ct, tag = bytes.fromhex(t["ct"]), bytes.fromhex(t["tag"])
    ops = [cipher_init(1, key=key)]
    if len(iv) != ivlen_default:
        ops.append(set_ivlen(len(iv), by_ctrl=pieces % 2 == 0))
    ops.append(reinit(None, iv=iv))
    if t["result"] == "valid":
        ops += [aad(a, pieces), data(msg, pieces, inplace=pieces == 2), final(), get_tag(len(tag)),
                reinit(0, iv=REPLAY), set_tag(tag, len(tag)), aad(a, pieces + 1),
                data(msg, pieces + 1, replay=True, offset=pieces), final(), get_state()]
    else:
        ops += [reinit(0, iv=REPLAY), set_tag(tag, len(tag)), aad(a, pieces), data(ct, pieces), final()]
    return seq_file(alg, *ops)


def get_state():
    return bytes([GET_STATE])


# Pipeline sequences (fuzz_pipeline.c): "PIPE", alg index, numpipes - 1, a key seed, the first
# init's two bytes, then steps.
PIPE_ALGS = ["AES-128-CTR", "AES-192-CTR", "AES-256-CTR", "AES-128-GCM", "AES-192-GCM", "AES-256-GCM",
             "ChaCha20-Poly1305", "ChaCha20"]


def p_len(n):
    return bytes([n]) if n < 120 else bytes([0xe0, n & 0xff, n >> 8])


def p_init_args(enc, replay=False, ivlen=None, seed=7):
    b = (1 if replay else 0) | (enc << 1) | ((4 | ((ivlen - 1) << 3)) if ivlen else 0)
    return bytes([b & 0xff, seed])


def p_init(enc, replay=False, ivlen=None, seed=7):
    return bytes([0]) + p_init_args(enc, replay, ivlen, seed)


def p_update(step, lens, seed=3, inplace=False, whole=False):
    return bytes([step, (1 if inplace else 0) | (2 if whole else 0), seed]) + b"".join(p_len(n) for n in lens)


def p_final(taglen=16, replay_tags=False, flip=0xff, seed=5):
    return bytes([3, ((taglen - 1) << 2) | (1 if replay_tags else 0), seed, flip])


def pipe_file(alg, npipes, first_init, *steps):
    return b"PIPE" + bytes([PIPE_ALGS.index(alg), npipes - 1, 11]) + first_init + b"".join(steps)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    vec, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    seeds = {}

    gcm = json.load(open(os.path.join(vec, "wycheproof", "aes_gcm_test.json")))
    picks = {1, 2, 68, 71, 73, 91, 92, 157, 176, 240, 259, 260, 266, 277, 280}
    n = 0
    for g in gcm["testGroups"]:
        for t in g["tests"]:
            if t["tcId"] in picks and g["ivSize"] <= 1024:
                seeds["wp-gcm-%d" % t["tcId"]] = aead_vector(gcm_name(g["keySize"]), t, 12, 1 + n % 4)
                n += 1
    invalid = [t for g in gcm["testGroups"] if g["ivSize"] == 96 for t in g["tests"] if t["result"] == "invalid"]
    for t in invalid[:2]:
        seeds["wp-gcm-%d-invalid" % t["tcId"]] = aead_vector("AES-128-GCM" if len(t["key"]) == 32 else
                                                              gcm_name(len(t["key"]) * 4), t, 12, 2)

    ccp = json.load(open(os.path.join(vec, "wycheproof", "chacha20_poly1305_test.json")))
    valid = [t for g in ccp["testGroups"] if g["ivSize"] == 96 for t in g["tests"] if t["result"] == "valid"]
    bad = [t for g in ccp["testGroups"] if g["ivSize"] == 96 for t in g["tests"] if t["result"] == "invalid"]
    for i, t in enumerate(valid[:5] + [v for v in valid if len(v["msg"]) > 500][:1]):
        seeds["wp-ccp-%d" % t["tcId"]] = aead_vector("ChaCha20-Poly1305", t, 12, 1 + i % 4)
    for t in bad[:1]:
        seeds["wp-ccp-%d-invalid" % t["tcId"]] = aead_vector("ChaCha20-Poly1305", t, 12, 3)

    rfc = json.load(open(os.path.join(vec, "rfc8439_vectors.json")))
    for i, v in enumerate(rfc["chacha20_encrypt"][:2]):
        # OpenSSL's ChaCha20 IV: the 32-bit little-endian block counter, then the 96-bit nonce
        iv = v["counter"].to_bytes(4, "little") + bytes.fromhex(v["nonce"])
        pt = bytes.fromhex(v["plaintext"])
        seeds["rfc8439-chacha20-%d" % i] = seq_file(
            "ChaCha20", cipher_init(1, key=bytes.fromhex(v["key"]), iv=iv), data(pt, 3), copy(pt[:21]),
            data(pt[:70], 1), reinit(0, iv=REPLAY), data(pt, 2, replay=True), final())
    for i, v in enumerate(rfc["aead_chacha20_poly1305"][:1]):
        t = {"key": v["key"], "iv": v["nonce"], "aad": v["aad"], "msg": v["plaintext"],
             "ct": v["ciphertext"], "tag": v["tag"], "result": "valid"}
        seeds["rfc8439-aead-%d" % i] = aead_vector("ChaCha20-Poly1305", t, 12, 2)

    # TLS 1.2 records (RFC 5288, RFC 7905): sent, then received from the replayed output.
    key16, key32, iv12 = bytes(range(16)), bytes(range(32)), bytes(range(100, 112))
    for alg, key, fixed in (("AES-128-GCM", key16, iv12[:4]), ("AES-256-GCM", key32, iv12[:4]),
                            ("ChaCha20-Poly1305", key32, iv12)):
        for plen in (0, 100, 1500):
            gcm_alg = alg != "ChaCha20-Poly1305"
            send_iv = tls_fixed_whole(iv12) if gcm_alg else tls_fixed(fixed)
            seeds["tls12-%s-%d" % (alg.lower(), plen)] = seq_file(
                alg, cipher_init(1, key=key), send_iv,
                tls_record(plen, 1, body=bytes(plen + 16 + (8 if gcm_alg else 0))),
                cipher_init(0, key=REPLAY), tls_fixed(fixed), tls_record(plen, 1, replay=True))

    # AES-CTR: streams cut anywhere, a copy mid-stream, a re-init without an IV.
    for alg, key in (("AES-128-CTR", key16), ("AES-256-CTR", key32)):
        iv = bytes([0xff] * 15 + [0xfe])   # the 128-bit counter wraps (SP 800-38A B.1)
        seeds["ctr-%s" % alg.lower()] = seq_file(
            alg, cipher_init(1, key=key, iv=iv), data(bytes(77), 3), copy(bytes(5)), data(bytes(50), 2),
            get_state(), reinit(None), data(bytes(33), 1), final(), reinit(0, iv=REPLAY),
            data(bytes(160), 4, replay=True))

    # The refusals gpuprov makes on purpose (docs/limitations.md, "Stricter than the default provider"), one each.
    seeds["strict-aad-after-data"] = seq_file(
        "ChaCha20-Poly1305", cipher_init(1, key=key32, iv=iv12), aad(b"a" * 5), data(b"d" * 20), aad(b"b" * 5), final())
    seeds["strict-update-after-final"] = seq_file(
        "ChaCha20-Poly1305", cipher_init(1, key=key32, iv=iv12), data(b"d" * 20), final(), data(b"e" * 16), get_tag())
    seeds["strict-get-tag-before-final"] = seq_file(
        "AES-256-GCM", cipher_init(1, key=key32, iv=iv12), data(b"d" * 20), final(), get_tag(),
        reinit(None, iv=REPLAY), data(b"d" * 20), get_tag())
    seeds["strict-stream-no-iv"] = seq_file("ChaCha20", cipher_init(1, key=key32), data(b"d" * 64), final())
    # A change under a begun message without a new IV (GP_R_NEW_IV_NEEDED), then a new IV
    seeds["strict-aead-rekey-midmsg"] = seq_file(
        "AES-128-GCM", cipher_init(1, key=key16, iv=iv12), data(b"d" * 20), reinit(None, key=REPLAY),
        data(b"e" * 16), final(), reinit(None, iv=iv12), data(b"d" * 20), final(), get_tag())
    seeds["strict-aead-direction-flip"] = seq_file(
        "ChaCha20-Poly1305", cipher_init(0, key=key32, iv=iv12), data(b"d" * 20), reinit(1), final(), get_tag())
    seeds["strict-gcm-ivlen-after-iv"] = seq_file(
        "AES-256-GCM", cipher_init(1, key=key32, iv=iv12), set_ivlen(16), get_state(), data(b"d" * 20), final())
    seeds["strict-chacha20-rekey-midstream"] = seq_file(
        "ChaCha20", cipher_init(1, key=key32, iv=bytes(16)), data(b"d" * 75), reinit(None), data(b"e" * 41),
        reinit(None, key=REPLAY), data(b"f" * 10))
    # ChaCha20-Poly1305 TLS1_IV_FIXED mid-message (GP_R_MESSAGE_IN_PROGRESS)
    seeds["strict-ccp-fixed-midmsg"] = seq_file(
        "ChaCha20-Poly1305", cipher_init(1, key=key32, iv=iv12), data(b"d" * 10), tls_fixed(iv12), data(b"e" * 10))

    # Pipelines (OpenSSL 3.5's EVP_CipherPipeline*): encrypted, then decrypted from the replay with
    # one pipe's tag forged; IV lengths, copies, refusals.
    lens32 = [0, 1, 15, 16, 17, 63, 64, 65] * 4
    seeds["pipe-ccp-32"] = pipe_file(
        "ChaCha20-Poly1305", 32, p_init_args(1), p_update(1, [13] * 32), p_update(2, lens32, inplace=True),
        p_update(2, [100] * 32), p_final(), p_init(0, replay=True), p_update(1, [0] * 32, whole=True),
        p_update(2, [0] * 32, whole=True), p_final(replay_tags=True, flip=3))
    seeds["pipe-gcm-8-iv16"] = pipe_file(
        "AES-256-GCM", 8, p_init_args(1, ivlen=16), p_update(1, [5, 0, 70, 1, 2, 3, 64, 65]),
        p_update(2, [1000, 0, 1, 300, 16, 17, 15, 2000]), bytes([5]), p_update(2, [3] * 8), p_final(12),
        p_init(0, replay=True), p_update(1, [0] * 8, whole=True), p_update(2, [7] * 8), bytes([5]),
        p_update(2, [0] * 8, whole=True), p_final(12, replay_tags=True))
    seeds["pipe-gcm-3-iv1"] = pipe_file(
        "AES-128-GCM", 3, p_init_args(1, ivlen=1), p_update(2, [40, 0, 33]), p_final(16),
        p_init(0, replay=True), p_update(2, [0] * 3, whole=True), p_final(16, replay_tags=True, flip=1))
    seeds["pipe-ctr-5"] = pipe_file(
        "AES-192-CTR", 5, p_init_args(1), p_update(2, [17, 0, 1, 1000, 64]), p_update(2, [15] * 5, inplace=True),
        bytes([4]), p_init(0), p_update(2, [33] * 5), p_final(), p_update(2, [1] * 5))
    seeds["pipe-chacha20-17"] = pipe_file(
        "ChaCha20", 17, p_init_args(1), p_update(2, list(range(0, 170, 10))), bytes([5]),
        p_update(2, [65] * 17), p_update(1, [4] * 17), p_init(1), p_update(2, [64] * 17), p_final())
    seeds["pipe-strict"] = pipe_file(
        "ChaCha20-Poly1305", 4, p_init_args(1), p_update(2, [10, 0, 0, 0]), p_update(1, [5] * 4),
        p_init(1), p_update(2, [10] * 4), p_final(), p_final(), p_update(2, [1] * 4), bytes([4]))

    for name, blob in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)
    print("make_corpus: %d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
