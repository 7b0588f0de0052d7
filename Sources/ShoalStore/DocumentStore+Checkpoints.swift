import Foundation
import ShoalStorage
import GRDB
import Logging

extension DocumentStore {
    /// Pages the write-ahead log may hold before a commit checkpoints it inline (16 MB
    /// of 4 KiB pages): the safety net of a store whose `runCheckpoints` is not running,
    /// and under a steady stream of commits the point where the log starts again from
    /// its beginning (a passive checkpoint beside a writer that never pauses rarely
    /// finishes the whole log, which a restart needs). That commit copies only what the
    /// last passive checkpoint left, and the `-wal` file stays at most about this size.
    static let inlineCheckpointPages = 4_000

    /// Copies the write-ahead log back into the database every `interval`, on a
    /// connection of its own, until the store closes or the task is cancelled.
    /// `ShoalNode.run` runs it (through `maintain`); a tool that opens a
    /// `DocumentStore` on its own may run it in a task of its own.
    ///
    /// SQLite's default checkpoints inside the commit that fills the log past 1,000
    /// pages: that commit (one in a hundred one-document writes) waited for the copy
    /// and two `fdatasync`s, several milliseconds. A passive checkpoint here takes no
    /// lock the writer or the readers wait for; when nothing was committed since the
    /// last one it does nothing. Durability is unchanged: a commit is in the log
    /// (and, with `synchronousFull`, on disk) before it returns, whenever the copy runs.
    package func runCheckpoints(interval: Duration = .milliseconds(500)) async {
        let connection: DatabaseQueue
        do {
            var configuration = Configuration()
            configuration.label = "shoal.checkpoint"
            connection = try DatabaseQueue(path: pool.path, configuration: configuration)
        } catch {
            logger.warning(
                "cannot open a connection for checkpoints; commits checkpoint the log themselves",
                metadata: ["shoal.error": "\(error)"])
            return
        }
        defer { try? connection.close() }
        while !running.isClosed {
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
            guard !running.isClosed else { return }
            do {
                _ = try await connection.writeWithoutTransaction { db in
                    self.checkpointing.lock()
                    defer { self.checkpointing.unlock() }
                    return try db.checkpoint(.passive)
                }
            } catch {
                // Busy (another checkpoint runs) or closing: the next round tries again.
                logger.debug("checkpoint skipped", metadata: ["shoal.error": "\(error)"])
            }
        }
    }
}

extension DocumentStore {
    /// The node's background upkeep of this store: checkpoints every 0.5 s.
    package func maintain() async { await runCheckpoints() }

    /// The bytes of the SQLite files (`shoal.sqlite`, `-wal`, `-shm`).
    package func storeBytes() -> UInt64 {
        [pool.path, pool.path + "-wal", pool.path + "-shm"].reduce(0) { total, path in
            total + ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.uint64Value ?? 0)
        }
    }
}
