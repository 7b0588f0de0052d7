#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
public import Musl
#elseif canImport(Darwin)
public import Darwin
#endif

/// A value behind a pthread mutex, for state that several threads share.
///
/// Shoal uses it instead of `Synchronization.Mutex` so that ThreadSanitizer can
/// judge a running node: on Linux it does not see the futex inside `Mutex` (the
/// toolchain's runtime is not instrumented), so every access a `Mutex` guards from
/// two threads is reported as a race, while it intercepts `pthread_mutex_lock`
/// like any other lock (docs/RELIABILITY.md, "Sanitizers").
public final class Locked<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock; `body` must not take it again.
    public func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
