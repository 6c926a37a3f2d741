"""The engine's accumulator lock, taken first by its sender thread (kipproducer._sender_lock).

threading.Lock is not fair. A caller's thread appending in slices (produce_batch,
produce_arrays, a produce() loop, the mirror) releases the lock and takes it again within a
microsecond, holding the GIL throughout; the sender thread, woken by the release, needs tens of
microseconds to run and finds the lock taken again. Measured on a 1M-record produce_batch: the
sender waited 9 to 18 ms for every drain, until the caller's call returned, while the broker
sat idle.

Here the sender thread raises a flag while it waits for the lock, and a caller arriving while
the flag is up gives way: with the GIL released it waits (2 ms at most) for the sender to have
the lock, then queues behind it. Uncontended, acquire() is a flag read and a non-blocking
acquire of the underlying lock.
"""
cimport cython
from cpython.pythread cimport (
    NOWAIT_LOCK, WAIT_LOCK, PyThread_acquire_lock, PyThread_allocate_lock, PyThread_free_lock,
    PyThread_get_thread_ident, PyThread_release_lock, PyThread_type_lock,
)
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cdef extern from "sched.h":
    int sched_yield() nogil

cdef extern from *:
    """
    /* The flag is written and read without the GIL (by the waiting sender, by a caller
       that gives way), so it goes through atomics. */
    static inline int kip_flag_load(int *flag) {
        return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
    }
    static inline void kip_flag_store(int *flag, int value) {
        __atomic_store_n(flag, value, __ATOMIC_RELEASE);
    }
    """
    int kip_flag_load(int *flag) nogil
    void kip_flag_store(int *flag, int value) nogil

# How long a caller gives way at most: enough for a woken thread to be scheduled, short
# enough that a sender stuck behind a third thread costs the caller little.
cdef enum:
    GIVE_WAY_NS = 2000000


cdef inline long long now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec


@cython.final
cdef class SenderFirstLock:
    """A non-reentrant lock (acquire / release / with, as threading.Lock) that the thread
    named by :meth:`bind_sender` gets ahead of the others when it has to wait."""
    cdef PyThread_type_lock _lock
    cdef int _sender_waiting
    cdef unsigned long _sender
    cdef bint _bound
    cdef bint _held

    def __cinit__(self):
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError("cannot allocate a lock")

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    def bind_sender(self):
        """The calling thread is the sender: it goes first from now on."""
        self._sender = PyThread_get_thread_ident()
        self._bound = True

    def acquire(self, bint blocking=True):
        """Take the lock; False only when ``blocking`` is false and it is taken."""
        cdef long long give_way_until
        cdef bint sender = self._bound and PyThread_get_thread_ident() == self._sender
        if not sender and kip_flag_load(&self._sender_waiting):
            if not blocking:
                return False
            with nogil:
                give_way_until = now_ns() + GIVE_WAY_NS
                while kip_flag_load(&self._sender_waiting) and now_ns() < give_way_until:
                    sched_yield()
                PyThread_acquire_lock(self._lock, WAIT_LOCK)
            self._held = True
            return True
        if PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            self._held = True
            return True
        if not blocking:
            return False
        with nogil:
            if sender:
                kip_flag_store(&self._sender_waiting, 1)
                PyThread_acquire_lock(self._lock, WAIT_LOCK)
                kip_flag_store(&self._sender_waiting, 0)
            else:
                PyThread_acquire_lock(self._lock, WAIT_LOCK)
        self._held = True
        return True

    def release(self):
        if not self._held:
            raise RuntimeError("release unlocked lock")
        self._held = False
        PyThread_release_lock(self._lock)

    def locked(self):
        return self._held

    @property
    def sender_waiting(self):
        """The sender thread waits for the lock (the others give way)."""
        return bool(kip_flag_load(&self._sender_waiting))

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc_info):
        self.release()
