# The C boundary of kipproducer._accumulator (src/_accel/accumulator.pyx; Cython finds a
# module's own .pxd by its full name, hence this kipproducer/ folder): the state that the
# per-record produce() fast path and note_appended() read and write, as typed fields of two
# cdef classes (and the report target a run of records carries, ReportTarget). The Python layer holds one instance of each (kipproducer.producer.Producer its
# ProduceState in the `_kip_state` slot, kipproducer.engine.engine.Engine its EngineState as
# `shared`) and keeps its old attribute names as properties over these fields; the C code
# reads them as struct fields, never by name.
#
# What a rename on one side only does: a C-typed field (bint, Py_ssize_t, int64_t) is read in
# a nogil helper of accumulator.pyx, so it is a compile error. For an object field Cython
# would compile a Python attribute lookup instead; these classes have no __dict__, so it
# raises AttributeError at the first call, and tests/kip/test_c_boundary.py fails before that
# (it checks every field the fast path names against this file).
from libc.stdint cimport int64_t


cdef class EngineState:
    """What the caller's thread and the engine's sender thread share about appended records:
    the accumulator and its lock, the outstanding-record count, and what the sleeping sender
    saw (note_appended decides from these whether an append wakes it)."""
    # The engine's RecordAccumulator (typed in __cinit__, never rebound), the lock that
    # guards it (kipproducer._sender_lock.SenderFirstLock) and the Condition that guards
    # `outstanding` and the report pile.
    cdef readonly object acc
    cdef readonly object lock
    cdef readonly object reports_cv
    cdef readonly Py_ssize_t message_max_bytes   # the engine's config.message_max_bytes
    # Engine.wake (tell the sender there is work) and the engine's "the sender died while
    # records were appended: fail what is held" (callables, so C calls them by reference).
    cdef readonly object wake
    cdef readonly object fail_held
    cdef public Py_ssize_t outstanding      # records appended, not yet reported
    cdef public bint dead                   # the sender thread has ended
    cdef public bint sender_idle            # the sender sleeps (an append may wake it)
    cdef public int64_t idle_closed         # acc.closed_batches when it went to sleep
    cdef public int64_t idle_until_ms       # when its alarm rings (monotonic ms)


cdef class ReportTarget:
    """What a run of records carries to its delivery report: who to tell, and how."""
    cdef public object callback             # the on_delivery callable, or None
    cdef public bint per_record             # a report per record (produce()), or per batch


cdef class ProduceState:
    """What a Producer's produce() needs to decide, per call, whether C appends the record."""
    cdef public object group                # its ProducerGroup, or None
    # The running Engine (None until the first engine call) and its EngineState: set together
    # by use_engine().
    cdef readonly object engine
    cdef readonly EngineState sender
    cdef public object txn                  # its TransactionManager, or None
    # offset= / expected_offset= need no per-call check of the configuration.
    cdef public bint kip_direct
    # topic -> [lane, records of that lane not yet reported]
    cdef readonly dict lanes
    cdef public ReportTarget last_target    # produce()'s last report target, or None
    cdef public object default_on_delivery  # the config's on_delivery / delivery.report.cb
