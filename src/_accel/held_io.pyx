"""Non-blocking socket calls that keep the GIL (compiled as kipproducer._held_io).

Python's socket methods release the GIL around every system call, so that a call that blocks
lets the other threads run. On a non-blocking socket no call blocks: releasing the GIL gains
nothing, and costs the engine's sender thread dearly while the caller's thread is busy (a
produce_batch call, delivery reports): the busy thread takes the GIL back at once and the
sender waits a whole switch interval (5 ms) to get it again, once per send and once per
receive. Measured on a 1M-record produce_batch: one Produce request written every ~6 ms while
the caller appended, with the broker idle in between.

These functions make the same system calls holding the GIL, and report errors as the socket
module does (BlockingIOError for EAGAIN, InterruptedError for EINTR, OSError otherwise), so
asyncio's transport treats them exactly as it treats the socket's own methods. They are only
for sockets in non-blocking mode.
"""
from cpython.buffer cimport (
    PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer,
)
from cpython.exc cimport PyErr_SetFromErrno
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.errno cimport errno
from libc.string cimport memset

cdef extern from "sys/types.h":
    ctypedef long ssize_t

cdef extern from "sys/uio.h":
    struct iovec:
        void *iov_base
        size_t iov_len

cdef extern from "sys/socket.h":
    struct msghdr:
        void *msg_name
        iovec *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    ssize_t c_send "send"(int fd, const void *buf, size_t n, int flags)
    ssize_t c_recv "recv"(int fd, void *buf, size_t n, int flags)
    ssize_t c_sendmsg "sendmsg"(int fd, const msghdr *msg, int flags)

cdef extern from *:
    """
    #include <sys/socket.h>
    #include <limits.h>
    #ifndef MSG_NOSIGNAL
    #define MSG_NOSIGNAL 0   /* macOS: Python ignores SIGPIPE, EPIPE is returned either way */
    #endif
    #ifndef IOV_MAX
    #define IOV_MAX 1024
    #endif
    """
    int MSG_NOSIGNAL
    int IOV_MAX


cdef inline object raise_errno(int err):
    """The socket module's exception for ``err`` (saved right after the call: releasing the
    buffers may change errno)."""
    global errno
    errno = err
    PyErr_SetFromErrno(OSError)
    return None


def send(int fd, data):
    """send(2) of a bytes-like ``data``; returns how many bytes the kernel took."""
    cdef Py_buffer view
    cdef ssize_t n
    cdef int err = 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        n = c_send(fd, view.buf, <size_t>view.len, MSG_NOSIGNAL)
        err = errno
    finally:
        PyBuffer_Release(&view)
    if n < 0:
        raise_errno(err)
    return n


def recv_into(int fd, buffer, Py_ssize_t nbytes=0):
    """recv(2) into a writable buffer (its whole length when ``nbytes`` is 0); returns how
    many bytes arrived, 0 at the end of the stream."""
    cdef Py_buffer view
    cdef ssize_t n
    cdef int err = 0
    try:
        PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
    except BufferError:  # as socket.recv_into says it
        raise TypeError("recv_into() argument 'buffer' must be read-write bytes-like "
                        f"object, not {type(buffer).__name__}") from None
    try:
        if nbytes < 0 or nbytes > view.len:
            raise ValueError("nbytes is larger than the buffer")
        n = c_recv(fd, view.buf, <size_t>(nbytes if nbytes else view.len), 0)
        err = errno
    finally:
        PyBuffer_Release(&view)
    if n < 0:
        raise_errno(err)
    return n


def sendmsg(int fd, buffers):
    """sendmsg(2) of a sequence of bytes-like objects, without ancillary data or an address
    (what asyncio's writelines sends); returns how many bytes the kernel took."""
    cdef list items = list(buffers)
    cdef Py_ssize_t count = min(len(items), IOV_MAX)
    cdef Py_buffer *views
    cdef iovec *iov
    cdef Py_ssize_t i, held = 0
    cdef ssize_t n = 0
    cdef int err = 0
    cdef msghdr msg
    if count == 0:
        return 0
    views = <Py_buffer *>PyMem_Malloc(count * sizeof(Py_buffer))
    iov = <iovec *>PyMem_Malloc(count * sizeof(iovec))
    if views == NULL or iov == NULL:
        PyMem_Free(views)
        PyMem_Free(iov)
        raise MemoryError()
    try:
        for i in range(count):
            PyObject_GetBuffer(items[i], &views[i], PyBUF_SIMPLE)
            held += 1
            iov[i].iov_base = views[i].buf
            iov[i].iov_len = <size_t>views[i].len
        memset(&msg, 0, sizeof(msg))
        msg.msg_iov = iov
        msg.msg_iovlen = <size_t>count
        n = c_sendmsg(fd, &msg, MSG_NOSIGNAL)
        err = errno
    finally:
        for i in range(held):
            PyBuffer_Release(&views[i])
        PyMem_Free(views)
        PyMem_Free(iov)
    if n < 0:
        raise_errno(err)
    return n
