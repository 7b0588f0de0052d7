import Testing

/// Every suite that runs `shoal` processes, one test at a time across all of them.
///
/// A process test blocks a thread of the concurrency pool while it waits for its
/// processes; on a 2-core machine the pool has two, so two such suites at once
/// would leave none for the in-process tests running beside them.
@Suite(.serialized) enum ProcessSuites {}
