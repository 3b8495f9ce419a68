/* SPDX-License-Identifier: Apache-2.0 */
/* A whole TLS 1.3 connection in memory, an HTTP-like exchange at a time: what libssl costs a server per response. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

/*
 * usage: tls_cost SERVER_CONF SUITE BODY COUNT|-SECONDS
 *   The server's SSL_CTX lives in a library context of its own that loads SERVER_CONF (an OpenSSL
 *   configuration: config/gpuprov.cnf for gpuprov, "-" for the default provider alone); the
 *   client's in another, the default provider alone, so that the two configurations differ only
 *   in the server. After one handshake (an ECDSA P-256 certificate made here), each exchange is
 *   what an nginx worker serves to a keep-alive client: a 78-byte request read, then a 200-byte
 *   response header and BODY bytes written through a 16 KiB buffer (nginx's ssl_buffer_size),
 *   one SSL_write per buffer, as nginx's ngx_ssl_send_chain does. Both ends run in this thread
 *   over a BIO pair. COUNT exchanges, or a negative number of seconds.
 * bench/tls_cost.sh runs it under callgrind twice per configuration: the difference per exchange
 * is the server's and the client's cost of one response, set-up cancelled; the client's is the
 * same in both configurations.
 */

#define BUF 16384

_Noreturn static void die(const char *what)
{
    fprintf(stderr, "tls_cost: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

/* A self-signed P-256 certificate and its key, made in the server's library context. */
static void make_cert(OSSL_LIB_CTX *lib, EVP_PKEY **key, X509 **cert)
{
    X509_NAME *name;

    *key = EVP_PKEY_Q_keygen(lib, NULL, "EC", "P-256");
    *cert = X509_new_ex(lib, NULL);
    if (*key == NULL || *cert == NULL)
        die("cannot make a key");
    ASN1_INTEGER_set(X509_get_serialNumber(*cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(*cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(*cert), 86400);
    X509_set_pubkey(*cert, *key);
    name = X509_get_subject_name(*cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(*cert, name);
    if (!X509_sign(*cert, *key, EVP_sha256()))
        die("cannot sign the certificate");
}

/* Write all of buf on s (the peer reads it in turn: the BIO pair holds more than one record set). */
static void write_all(SSL *s, const unsigned char *buf, size_t len)
{
    size_t done;

    if (!SSL_write_ex(s, buf, len, &done) || done != len)
        die("SSL_write failed");
}

static void read_all(SSL *s, unsigned char *buf, size_t len)
{
    size_t got = 0, n;

    while (got < len) {
        if (!SSL_read_ex(s, buf, len - got < BUF ? len - got : BUF, &n))
            die("SSL_read failed");
        got += n;
    }
}

int main(int argc, char **argv)
{
    static unsigned char req[78], hdr[200], body_buf[BUF], in[BUF];
    OSSL_LIB_CTX *slib, *clib;
    SSL_CTX *sctx, *cctx;
    SSL *srv, *cli;
    BIO *sb, *cb;
    EVP_PKEY *key;
    X509 *cert;
    long body, n, done = 0;
    struct timespec a, b;
    double secs;

    if (argc != 5) {
        fprintf(stderr, "usage: tls_cost SERVER_CONF|- SUITE BODY COUNT|-SECONDS\n");
        return 2;
    }
    body = strtol(argv[3], NULL, 10);
    n = strtol(argv[4], NULL, 10);
    if (body < 0 || n == 0)
        die("bad arguments");
    slib = OSSL_LIB_CTX_new();
    clib = OSSL_LIB_CTX_new();
    if (slib == NULL || clib == NULL || (strcmp(argv[1], "-") != 0 && !OSSL_LIB_CTX_load_config(slib, argv[1])))
        die("cannot load the server's configuration");
    make_cert(slib, &key, &cert);
    sctx = SSL_CTX_new_ex(slib, NULL, TLS_server_method());
    cctx = SSL_CTX_new_ex(clib, NULL, TLS_client_method());
    if (sctx == NULL || cctx == NULL || !SSL_CTX_use_certificate(sctx, cert) || !SSL_CTX_use_PrivateKey(sctx, key))
        die("cannot make the SSL contexts");
    for (SSL_CTX **c = (SSL_CTX *[]){ sctx, cctx, NULL }; *c != NULL; c++)
        if (!SSL_CTX_set_min_proto_version(*c, TLS1_3_VERSION) || !SSL_CTX_set_ciphersuites(*c, argv[2]))
            die("cannot set the suite");
    SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, NULL);
    srv = SSL_new(sctx);
    cli = SSL_new(cctx);
    if (srv == NULL || cli == NULL || !BIO_new_bio_pair(&sb, 4 * BUF + 4096, &cb, 4 * BUF + 4096))
        die("cannot make the connection");
    SSL_set_bio(srv, sb, sb);
    SSL_set_bio(cli, cb, cb);
    SSL_set_accept_state(srv);
    SSL_set_connect_state(cli);
    for (int i = 0; i < 100 && !(SSL_is_init_finished(srv) && SSL_is_init_finished(cli)); i++) {
        (void)SSL_do_handshake(cli);
        (void)SSL_do_handshake(srv);
    }
    if (!SSL_is_init_finished(srv) || !SSL_is_init_finished(cli))
        die("no handshake");
    memset(req, 'r', sizeof(req));
    memset(hdr, 'h', sizeof(hdr));
    memset(body_buf, 'b', sizeof(body_buf));
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (;;) {
        for (int i = 0; i < 100 && (n < 0 || done < n); i++, done++) {
            size_t left = sizeof(hdr) + (size_t)body, first = 1;

            write_all(cli, req, sizeof(req));
            read_all(srv, in, sizeof(req));
            /* The response through nginx's 16 KiB buffer: the header, then the body, a write per
             * full buffer (the pair holds four: the client reads after each write). */
            while (left > 0) {
                size_t chunk = left < BUF ? left : BUF;

                if (first) {
                    memcpy(body_buf, hdr, sizeof(hdr));
                    first = 0;
                }
                write_all(srv, body_buf, chunk);
                read_all(cli, in, chunk);
                left -= chunk;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
        if (n > 0 ? done >= n : secs >= (double)-n)
            break;
    }
    printf("tls_cost %s %s %ld B: %ld exchanges, %.1f us each\n", argv[1], argv[2], body, done,
           secs * 1e6 / (double)done);
    SSL_free(srv);
    SSL_free(cli);
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    X509_free(cert);
    EVP_PKEY_free(key);
    OSSL_LIB_CTX_free(slib);
    OSSL_LIB_CTX_free(clib);
    return 0;
}
