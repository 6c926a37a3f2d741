# The server side of a TLS connection on OpenSSL itself, for kip broker's TLS listeners.
#
# asyncio's TLS transport passes every received byte through an OpenSSL memory buffer (which
# zero-fills and copies it) and turns a Python loop once per 16 KB TLS record. Here OpenSSL
# reads the socket itself, ahead of the record it decrypts (read-ahead: one receive for many
# records), and a whole receive buffer is filled in one call with the GIL released. Measured
# on the TLS produce bench: the broker's CPU per produced record down ~10% (bench/RESULTS.md).
#
# Only what a listener without client certificates needs lives here (the certificate chain
# and key, TLS 1.2 as the floor); listeners that ask for client certificates or set
# ssl.cipher.suites keep asyncio's transport (broker/security/tls.py decides).
#
# OpenSSL keeps one error queue per thread, shared with Python's ssl module: every call
# starts with an empty queue and leaves it empty, so neither side reads the other's errors.

from cpython.bytes cimport PyBytes_AS_STRING
from libc.string cimport memcpy, strlen

cdef extern from "openssl/err.h":
    unsigned long ERR_get_error() nogil
    void ERR_clear_error() nogil
    void ERR_error_string_n(unsigned long e, char *buf, size_t len) nogil

cdef extern from "openssl/ssl.h":
    ctypedef struct SSL_CTX:
        pass
    ctypedef struct SSL:
        pass
    ctypedef struct SSL_METHOD:
        pass
    ctypedef int (*pem_password_cb)(char *buf, int size, int rwflag, void *userdata)
    const SSL_METHOD *TLS_server_method()
    SSL_CTX *SSL_CTX_new(const SSL_METHOD *method)
    void SSL_CTX_free(SSL_CTX *ctx)
    int SSL_CTX_use_certificate_chain_file(SSL_CTX *ctx, const char *path)
    int SSL_CTX_use_PrivateKey_file(SSL_CTX *ctx, const char *path, int kind)
    int SSL_CTX_check_private_key(const SSL_CTX *ctx)
    void SSL_CTX_set_default_passwd_cb(SSL_CTX *ctx, pem_password_cb cb)
    void SSL_CTX_set_default_passwd_cb_userdata(SSL_CTX *ctx, void *userdata)
    int SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version)
    unsigned long SSL_CTX_set_options(SSL_CTX *ctx, unsigned long options)
    long SSL_CTX_set_mode(SSL_CTX *ctx, long mode)
    void SSL_CTX_set_read_ahead(SSL_CTX *ctx, int yes)
    int SSL_CTX_set_cipher_list(SSL_CTX *ctx, const char *ciphers)
    SSL *SSL_new(SSL_CTX *ctx)
    void SSL_free(SSL *ssl)
    int SSL_set_fd(SSL *ssl, int fd)
    void SSL_set_accept_state(SSL *ssl)
    int SSL_do_handshake(SSL *ssl) nogil
    int SSL_read(SSL *ssl, void *buf, int size) nogil
    int SSL_write(SSL *ssl, const void *buf, int size) nogil
    int SSL_shutdown(SSL *ssl) nogil
    int SSL_get_error(const SSL *ssl, int ret) nogil
    int SSL_FILETYPE_PEM
    int TLS1_2_VERSION
    int SSL_ERROR_WANT_READ
    int SSL_ERROR_WANT_WRITE
    int SSL_ERROR_ZERO_RETURN
    int SSL_ERROR_SYSCALL
    unsigned long SSL_OP_NO_COMPRESSION
    unsigned long SSL_OP_NO_RENEGOTIATION
    unsigned long SSL_OP_CIPHER_SERVER_PREFERENCE
    unsigned long SSL_OP_IGNORE_UNEXPECTED_EOF
    long SSL_MODE_ENABLE_PARTIAL_WRITE
    long SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER

#: handshake(), read_into() and write() outcomes besides progress.
WANT_READ = 1
WANT_WRITE = 2

# The TLS 1.2 cipher list of Python's own server contexts (ssl.SSLContext): the same choice as
# the listeners that keep asyncio's transport. TLS 1.3 suites are OpenSSL's defaults there too.
cdef const char *PYTHON_DEFAULT_CIPHERS = (
    "@SECLEVEL=2:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:DHE+AES:!aNULL:!eNULL:!aDSS:!SHA1:!AESCCM")


cdef str _openssl_error(str what):
    """What OpenSSL's error queue says, emptied; ``what`` when it says nothing."""
    cdef char buf[256]
    cdef unsigned long code = ERR_get_error()
    cdef unsigned long more
    if code == 0:
        return what
    ERR_error_string_n(code, buf, sizeof(buf))
    more = ERR_get_error()
    while more:
        more = ERR_get_error()
    return f"{what}: {buf[:strlen(buf)].decode('utf-8', 'replace')}"


cdef int _give_password(char *buf, int size, int rwflag, void *userdata) noexcept nogil:
    """OpenSSL's question for the key's password: the one given (a NUL-terminated string),
    or none, so that OpenSSL never prompts on the terminal."""
    cdef size_t n
    if userdata == NULL:
        return 0
    n = strlen(<const char *>userdata)
    if n > <size_t>size:
        n = <size_t>size
    memcpy(buf, userdata, n)
    return <int>n


cdef class ServerContext:
    """OpenSSL's server context for one keystore: a PEM file holding the private key and the
    certificate chain, and the key's password (None: not encrypted)."""

    cdef SSL_CTX *ctx
    cdef bytes _password   # kept alive: OpenSSL holds a pointer to it while loading

    def __cinit__(self, str keystore_path not None, password=None):
        cdef bytes path = keystore_path.encode()
        ERR_clear_error()
        self.ctx = SSL_CTX_new(TLS_server_method())
        if self.ctx == NULL:
            raise OSError(_openssl_error("cannot make a TLS server context"))
        SSL_CTX_set_min_proto_version(self.ctx, TLS1_2_VERSION)
        SSL_CTX_set_options(self.ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION
                            | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF)
        # Partial writes, from a buffer that may move between retries: the transport writes
        # what it can of its output buffer and keeps the rest there (it grows meanwhile).
        SSL_CTX_set_mode(self.ctx, SSL_MODE_ENABLE_PARTIAL_WRITE
                         | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER)
        SSL_CTX_set_read_ahead(self.ctx, 1)
        if SSL_CTX_set_cipher_list(self.ctx, PYTHON_DEFAULT_CIPHERS) != 1:
            raise OSError(_openssl_error("cannot set the cipher list"))
        self._password = password.encode() if password else None
        SSL_CTX_set_default_passwd_cb(self.ctx, _give_password)
        SSL_CTX_set_default_passwd_cb_userdata(
            self.ctx, <void *>PyBytes_AS_STRING(self._password)
            if self._password is not None else NULL)
        if SSL_CTX_use_certificate_chain_file(self.ctx, path) != 1:
            raise OSError(_openssl_error(f"cannot load the certificate chain of {keystore_path}"))
        if SSL_CTX_use_PrivateKey_file(self.ctx, path, SSL_FILETYPE_PEM) != 1:
            raise OSError(_openssl_error(f"cannot load the private key of {keystore_path}"))
        if SSL_CTX_check_private_key(self.ctx) != 1:
            raise OSError(_openssl_error("the private key does not match the certificate"))
        ERR_clear_error()

    def __dealloc__(self):
        if self.ctx != NULL:
            SSL_CTX_free(self.ctx)


cdef class ServerConnection:
    """One accepted socket's TLS session; the socket must be non-blocking and stay open while
    this lives (the caller owns it)."""

    cdef SSL *ssl
    cdef ServerContext context   # kept alive: the session refers to its context

    def __cinit__(self, ServerContext context not None, int fd):
        self.context = context
        self.ssl = SSL_new(context.ctx)
        if self.ssl == NULL:
            raise OSError(_openssl_error("cannot start a TLS session"))
        if SSL_set_fd(self.ssl, fd) != 1:
            raise OSError(_openssl_error("cannot attach the TLS session to its socket"))
        SSL_set_accept_state(self.ssl)

    def __dealloc__(self):
        if self.ssl != NULL:
            SSL_free(self.ssl)

    cdef int _outcome(self, int ret, str what) except -2:
        """After a call that did not complete: WANT_READ / WANT_WRITE, -1 for the peer's
        close, or OSError naming what went wrong."""
        cdef int error = SSL_get_error(self.ssl, ret)
        if error == SSL_ERROR_WANT_READ:
            ERR_clear_error()
            return WANT_READ
        if error == SSL_ERROR_WANT_WRITE:
            ERR_clear_error()
            return WANT_WRITE
        if error == SSL_ERROR_ZERO_RETURN:
            ERR_clear_error()
            return -1
        if error == SSL_ERROR_SYSCALL:
            message = _openssl_error(what)
            raise ConnectionResetError(message if message != what else f"{what}: the peer "
                                       "reset the connection")
        raise OSError(_openssl_error(what))

    def handshake(self):
        """0 when done, WANT_READ / WANT_WRITE to call again when the socket is ready."""
        cdef int ret, outcome
        ERR_clear_error()
        ret = SSL_do_handshake(self.ssl)
        if ret == 1:
            return 0
        outcome = self._outcome(ret, "TLS handshake failed")
        if outcome == -1:
            raise ConnectionResetError("TLS handshake failed: the peer closed the connection")
        return outcome

    def read_into(self, unsigned char[::1] buffer not None):
        """Decrypt into ``buffer`` until it is full or nothing more has arrived: the byte
        count, 0 for nothing now (wait for the socket), -1 when the peer closed the session."""
        cdef int n = 0, total = 0, ret = 0
        cdef Py_ssize_t capacity = buffer.shape[0]
        cdef int chunk
        if capacity == 0:
            return 0
        ERR_clear_error()
        with nogil:
            while total < capacity:
                chunk = <int>min(capacity - total, 1 << 30)
                n = SSL_read(self.ssl, &buffer[total], chunk)
                if n <= 0:
                    ret = n
                    break
                total += n
        if total:
            if n <= 0:
                # What stopped the loop is read again by the next call; the queue stays empty.
                ERR_clear_error()
            return total
        outcome = self._outcome(ret, "TLS read failed")
        return -1 if outcome == -1 else 0

    def write(self, const unsigned char[::1] data not None):
        """Encrypt and send the start of ``data``: how many bytes went (0: the socket is
        full; call again with the same bytes first when it is writable)."""
        cdef int n
        cdef int size = <int>min(data.shape[0], 1 << 30)
        if size == 0:
            return 0
        ERR_clear_error()
        with nogil:
            n = SSL_write(self.ssl, &data[0], size)
        if n > 0:
            return n
        outcome = self._outcome(n, "TLS write failed")
        if outcome == -1:
            raise ConnectionResetError("TLS write failed: the peer closed the session")
        return 0

    def shutdown(self):
        """Send close_notify (best effort: a full socket or a gone peer is not an error)."""
        ERR_clear_error()
        SSL_shutdown(self.ssl)
        ERR_clear_error()
