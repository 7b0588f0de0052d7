import Foundation
import ShoalCRDT

/// What each peer, by certificate name, was last allowed to read by a session that
/// served its subscriptions: a session under other read rights streams from the log's
/// start (`SessionStateMachine.Configuration.resendFromStart`), since the peer's cursor
/// says what it holds of what it could read before, not of what it may read now.
///
/// Kept in a file when the node gives one (`SyncConfiguration.servedReadsFile`), so
/// that rules widened while the node was stopped are noticed when it starts again: a
/// peer resuming from its cursor would otherwise never get what was written before in
/// what it may now read. A file that cannot be read starts empty (the next session of
/// each peer is then taken as unchanged, as before it was kept); one that cannot be
/// written is logged and kept in memory.
final class ServedReads: Sendable {
    private let file: String?
    private let served: Locked<[String: String]>

    /// `problem` is told why a file that is there could not be read.
    init(file: String?, problem: (String) -> Void = { _ in }) {
        self.file = file
        var loaded: [String: String] = [:]
        if let file, let data = FileManager.default.contents(atPath: file) {
            do {
                loaded = try JSONDecoder().decode([String: String].self, from: data)
            } catch {
                problem("\(file) does not hold what each peer was served under (\(error)); starting without it")
            }
        }
        self.served = Locked(loaded)
    }

    /// Whether a session of `identity` allowed to read `read` must stream from the
    /// log's start: it was served under other read rights before.
    func changed(_ identity: String, _ read: PeerRights.Read) -> Bool {
        served.withLock { $0[identity] }.map { $0 != Self.fingerprint(read) } ?? false
    }

    /// `identity` was served under `read`; written to the file when that is news.
    /// - Throws: the file could not be written (what is in memory holds).
    func note(_ identity: String, _ read: PeerRights.Read) throws {
        let fingerprint = Self.fingerprint(read)
        let file = self.file
        // Written under the lock: two peers noted at once must not write their copies
        // in the other order, leaving the file without the first one's entry.
        try served.withLock { s in
            guard s[identity] != fingerprint else { return }
            s[identity] = fingerprint
            guard let file else { return }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
            try encoder.encode(s).write(to: URL(fileURLWithPath: file), options: .atomic)
        }
    }

    /// A text equal for equal rights: `*`, or each collection and its condition, sorted.
    static func fingerprint(_ read: PeerRights.Read) -> String {
        switch read {
        case .everything: return "*"
        case .collections(let collections):
            let entries = collections.sorted { $0.key < $1.key }.map { [$0.key, $0.value ?? ""] }
            let data = (try? JSONSerialization.data(withJSONObject: entries, options: [])) ?? Data()
            return String(decoding: data, as: UTF8.self)
        }
    }
}
