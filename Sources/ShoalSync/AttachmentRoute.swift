import ShoalCRDT

/// Where an AttachmentRequest has been, and whether a node that does not hold the
/// bytes may pass it on: the rule that keeps relayed requests out of cycles.
///
/// A request names in `via` the sites it passed through, the one that began the
/// fetch first and its sender last. The receiver adds the asker (a node that
/// predates `via` names none), and asks only peers on neither list, only while the
/// path is shorter than `maximumPath`; its own requests name the path and itself.
/// A request that names the receiver came round a cycle, and is answered at once.
///
/// ```
///  C ──via [C]──▶ B ──via [C, B]──▶ A ──via [C, B, A]──▶ (none: C and B are on the path)
/// ```
struct AttachmentRoute: Sendable, Equatable {
    /// The sites the request passed through, the asker last.
    let path: [SiteID]

    init(via: [SiteID], asker: SiteID) {
        var path = via
        if !path.contains(asker) { path.append(asker) }
        self.path = path
    }

    /// What a node that does not hold the bytes does with the request.
    enum Decision: Sendable, Equatable {
        /// The request names this node: it came round a cycle. Answer "not found".
        case cycle
        /// The path is long enough, or no peer is off it: answer "not found".
        case stop
        /// Fetch the bytes from `peers`, with requests that name `via`.
        case relay(via: [SiteID], peers: [SiteID])
    }

    func decide(local: SiteID, connected: [SiteID], maximumPath: Int) -> Decision {
        if path.contains(local) { return .cycle }
        guard path.count < maximumPath else { return .stop }
        let peers = connected.filter { !path.contains($0) && $0 != local }
        return peers.isEmpty ? .stop : .relay(via: path + [local], peers: peers)
    }
}
