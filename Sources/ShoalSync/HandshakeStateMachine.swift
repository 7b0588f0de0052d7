public import ShoalCRDT
public import ShoalWire
import Crypto
import Foundation

/// What a side of a session is: a node of the mesh, or an admin client (the CLI).
public enum PeerRole: Sendable, Hashable {
    case peer
    case admin

    /// A Hello's role: anything but admin (a role a later version adds) is a peer.
    init(_ wire: Shoal_V1_Role) {
        self = wire == .admin ? .admin : .peer
    }

    var wire: Shoal_V1_Role {
        switch self {
        case .peer: .peer
        case .admin: .admin
        }
    }
}

/// Who the other side turned out to be, once the handshake succeeds.
public struct PeerIdentity: Sendable, Hashable {
    public var siteID: SiteID
    public var name: String
    public var role: PeerRole
    public var listenAddress: String
    /// The protocol version both sides speak: the highest in both ranges.
    public var version: UInt32
    /// What the other side said it can take (Hello fields 11 and 12), for what this
    /// node sends it; `.unknown` from a node that predates them.
    public var limits: PeerLimits = .unknown
}

/// What a peer said in its Hello that it can take: the largest frame payload
/// (inflated or not) and the largest document body, in bytes. A sender fits its
/// batches to the first and withholds, with an `overLimit` verdict, what breaks
/// either (PROTOCOL.md §6.1, §8.3).
public struct PeerLimits: Sendable, Hashable {
    /// 0: not said.
    public var maximumFrameSize: Int
    /// 0: not said.
    public var documentSizeHardLimit: Int

    public init(maximumFrameSize: Int, documentSizeHardLimit: Int) {
        self.maximumFrameSize = maximumFrameSize
        self.documentSizeHardLimit = documentSizeHardLimit
    }

    /// A peer that said nothing: sent to as before limits were exchanged, within the
    /// protocol's default frame limit and with no `overLimit` verdicts.
    public static let unknown = PeerLimits(maximumFrameSize: 0, documentSizeHardLimit: 0)

    /// Whether the peer said its limits, and so understands `overLimit` verdicts.
    public var areKnown: Bool { maximumFrameSize > 0 }

    /// The largest payload to send the peer: what it said, or else the default limit.
    public var framePayload: Int { maximumFrameSize > 0 ? maximumFrameSize : WireLimits.default.maximumFrameSize }
}

/// The opening of every connection, as a value type that returns what to do.
///
/// ```
///   start ──send Hello──► awaitingHello ──recv Hello / send Proof──► awaitingProof
///                                                                       │ recv Proof (valid)
///                                                                       ▼
///   failed ◄── any mismatch, or a stale peer: send Error(fatal), close   established
/// ```
///
/// Both sides run the same machine at once; neither waits for the other to speak
/// first. The proof is `HMAC-SHA256(key, "shoal-proof-v1" || receiver nonce ||
/// sender nonce || sender site ID)`, so it cannot be replayed on another
/// connection (fresh nonces) or reflected back (it binds the sender's site ID).
public struct HandshakeStateMachine: Sendable {
    public struct Configuration: Sendable {
        public var siteID: SiteID
        public var nodeName: String
        public var meshName: String
        /// The shared mesh key; `nil` for an open mesh.
        public var meshKey: [UInt8]?
        /// The key an admin client must prove to this node instead of the mesh key
        /// (`shoal run --admin-key-file`); `nil`: admin clients prove the mesh key.
        public var adminKey: [UInt8]?
        /// Whether an admin client may connect without proving a key when this node has
        /// none: true on loopback (and in-memory) connections, false on connections from
        /// any other address, whose admin clients are refused.
        public var acceptsKeylessAdmin: Bool
        public var role: PeerRole
        public var listenAddress: String
        public var versions: ClosedRange<UInt32>
        /// This node's freshness, sent in Hello (see `Freshness`).
        public var freshness: [SiteID: UInt64]
        /// Whether this node's store holds anything another node wrote (Hello says when not).
        public var holdsOthersWrites: Bool
        /// The newest deletion this node has forgotten, Unix ms; a peer holding others' writes
        /// whose freshness entry for this node is below it is refused (STALE_REPLICA).
        /// 0: none forgotten.
        public var forgottenThrough: UInt64
        /// What this node can take, said in its Hello to peers.
        public var limits: PeerLimits

        public init(
            siteID: SiteID, nodeName: String, meshName: String, meshKey: [UInt8]?, role: PeerRole = .peer,
            listenAddress: String = "", versions: ClosedRange<UInt32> = HandshakeStateMachine.supportedVersions,
            adminKey: [UInt8]? = nil, acceptsKeylessAdmin: Bool = true, freshness: [SiteID: UInt64] = [:],
            holdsOthersWrites: Bool = true, forgottenThrough: UInt64 = 0, limits: PeerLimits = .unknown
        ) {
            self.limits = limits
            self.freshness = freshness
            self.holdsOthersWrites = holdsOthersWrites
            self.forgottenThrough = forgottenThrough
            self.siteID = siteID
            self.nodeName = nodeName
            self.meshName = meshName
            self.meshKey = meshKey
            self.adminKey = adminKey
            self.acceptsKeylessAdmin = acceptsKeylessAdmin
            self.role = role
            self.listenAddress = listenAddress
            self.versions = versions
        }
    }

    public enum Action: Sendable, Equatable {
        case send(WireMessage)
        /// The handshake is done; the session may start.
        case established(PeerIdentity)
        /// Send the error (unless it came from the peer), then close.
        case fail(SyncError)
    }

    enum State: Sendable {
        case idle
        case awaitingHello
        case awaitingProof(Shoal_V1_Hello)
        case established
        case failed
    }

    /// Version 2 added transaction manifests and coverage, version 3 stepped delta
    /// positions and timestamps, version 4 routes: lazy links that offer transaction
    /// IDs (PROTOCOL.md §13); admin sessions work at any of them, peer sessions need
    /// version 2.
    public static let supportedVersions: ClosedRange<UInt32> = 1...4
    /// The lowest version two peers sync at.
    public static let minimumPeerVersion: UInt32 = 2
    public static let nonceSize = 32
    static let proofLabel = Array("shoal-proof-v1".utf8)

    public let configuration: Configuration
    let nonce: [UInt8]
    var state: State = .idle

    public init(configuration: Configuration, nonce: [UInt8]? = nil) {
        self.configuration = configuration
        if let nonce {
            self.nonce = nonce
        } else {
            var g = SystemRandomNumberGenerator()
            self.nonce = (0..<Self.nonceSize).map { _ in UInt8.random(in: 0...255, using: &g) }
        }
    }

    public var isEstablished: Bool {
        if case .established = state { return true }
        return false
    }

    /// The Hello to send as soon as the connection opens.
    public mutating func start() -> [Action] {
        guard case .idle = state else { return [] }
        state = .awaitingHello
        var hello = Shoal_V1_Hello()
        hello.minVersion = configuration.versions.lowerBound
        hello.maxVersion = configuration.versions.upperBound
        hello.siteID = configuration.siteID.rawValue
        hello.nodeName = configuration.nodeName
        hello.meshName = configuration.meshName
        hello.nonce = Data(nonce)
        hello.role = configuration.role.wire
        hello.listenAddress = configuration.listenAddress
        if configuration.role != .admin {
            hello.freshness = Freshness.wire(configuration.freshness)
            hello.holdsOnlyOwnWrites = !configuration.holdsOthersWrites
            hello.maxFrameSize = UInt64(max(0, configuration.limits.maximumFrameSize))
            hello.documentSizeHardLimit = UInt64(max(0, configuration.limits.documentSizeHardLimit))
        }
        return [.send(.hello(hello))]
    }

    /// Feeds one message received before the session was established.
    public mutating func receive(_ message: WireMessage) -> [Action] {
        switch (state, message) {
        case (_, .error(let error)):
            state = .failed
            return [.fail(SyncError(received: error))]
        case (.awaitingHello, .hello(let hello)):
            return Self.naming(receiveHello(hello), site: hello.siteID)
        case (.awaitingProof(let hello), .proof(let proof)):
            return Self.naming(receiveProof(proof, hello: hello), site: hello.siteID)
        case (.failed, _):
            return []
        default:
            return fail(.protocolViolation, "unexpected \(message.type) frame during the handshake")
        }
    }

    /// A failure after the peer's Hello names the peer's site, for the log.
    private static func naming(_ actions: [Action], site: UInt64) -> [Action] {
        guard site != 0 else { return actions }
        return actions.map { action in
            guard case .fail(var error) = action, error.peer == nil else { return action }
            error.peer = SiteID(site)
            return .fail(error)
        }
    }

    private mutating func fail(_ code: SyncError.Code, _ message: String) -> [Action] {
        state = .failed
        return [.fail(SyncError(code, message))]
    }

    private mutating func receiveHello(_ hello: Shoal_V1_Hello) -> [Action] {
        guard hello.minVersion <= hello.maxVersion else {
            return fail(.protocolViolation, "Hello has an empty version range \(hello.minVersion)–\(hello.maxVersion)")
        }
        let low = max(hello.minVersion, configuration.versions.lowerBound)
        let high = min(hello.maxVersion, configuration.versions.upperBound)
        guard low <= high else {
            return fail(
                .unsupportedVersion,
                "no common protocol version: the peer speaks \(hello.minVersion)–\(hello.maxVersion), this node speaks \(configuration.versions.lowerBound)–\(configuration.versions.upperBound)"
            )
        }
        if hello.role != .admin, configuration.role != .admin, high < Self.minimumPeerVersion {
            return fail(
                .unsupportedVersion,
                "peers sync at protocol version \(Self.minimumPeerVersion) or later (transaction manifests); the peer speaks \(hello.minVersion)–\(hello.maxVersion)"
            )
        }
        guard hello.nonce.count == Self.nonceSize else {
            return fail(.protocolViolation, "Hello nonce is \(hello.nonce.count) bytes, expected \(Self.nonceSize)")
        }
        let peerIsAdmin = hello.role == .admin
        let weAreAdmin = configuration.role == .admin
        if peerIsAdmin && weAreAdmin {
            return fail(.protocolViolation, "both sides are admin clients")
        }
        if !peerIsAdmin {
            guard hello.siteID != 0 else { return fail(.protocolViolation, "Hello from a peer has site ID 0") }
            if hello.siteID == configuration.siteID.rawValue {
                state = .failed
                return [
                    .fail(
                        SyncError(
                            .duplicateSession, "connected to itself (site \(configuration.siteID))",
                            peer: configuration.siteID))
                ]
            }
        }
        // Admin clients may leave the mesh name empty; peers must agree on it.
        if !(peerIsAdmin && hello.meshName.isEmpty) && !(weAreAdmin && configuration.meshName.isEmpty),
            hello.meshName != configuration.meshName
        {
            return fail(
                .meshMismatch,
                "mesh name mismatch: the peer is in mesh '\(hello.meshName)', this node is in mesh '\(configuration.meshName)'"
            )
        }
        let key = self.key(for: PeerRole(hello.role))
        if peerIsAdmin, key == nil, !configuration.acceptsKeylessAdmin {
            return fail(
                .meshKeyMismatch,
                "this node takes admin requests from beyond loopback only from clients that prove its key, and it has none: start it with --admin-key-file or --mesh-key-file (shoal keygen FILE makes a key)"
            )
        }
        state = .awaitingProof(hello)
        if !peerIsAdmin, !weAreAdmin,
            let refusal = Freshness.refusal(
                peer: SiteID(hello.siteID), peerFreshness: Freshness.entries(hello.freshness),
                peerHoldsOthersWrites: !hello.holdsOnlyOwnWrites, node: configuration.siteID,
                forgottenThrough: configuration.forgottenThrough)
        {
            // Refused at once, before either proof: the peer learns why inside its
            // handshake, and two nodes that each refuse the other both hear it.
            return fail(.staleReplica, refusal)
        }
        var proof = Shoal_V1_Proof()
        if let key {
            proof.mac = Data(
                Self.mac(key: key, receiverNonce: Array(hello.nonce), senderNonce: nonce, sender: configuration.siteID))
        }
        return [.send(.proof(proof))]
    }

    /// The key the other side must prove, and this side proves to it: the admin key
    /// for an admin client when this node has one, the mesh key otherwise.
    func key(for role: PeerRole) -> [UInt8]? {
        role == .admin && configuration.role != .admin ? configuration.adminKey ?? configuration.meshKey : configuration.meshKey
    }

    private mutating func receiveProof(_ proof: Shoal_V1_Proof, hello: Shoal_V1_Hello) -> [Action] {
        let peerSite = SiteID(hello.siteID)
        switch (key(for: PeerRole(hello.role)), proof.mac.isEmpty) {
        case (nil, true):
            break
        case (nil, false):
            return fail(.meshKeyMismatch, "mesh key mismatch: the peer proves a mesh key, but this node has none")
        case (_?, true):
            return fail(.meshKeyMismatch, "mesh key mismatch: this mesh requires a key and the peer sent no proof")
        case (let key?, false):
            let data = Self.proofInput(receiverNonce: nonce, senderNonce: Array(hello.nonce), sender: peerSite)
            let valid = HMAC<SHA256>.isValidAuthenticationCode(
                Array(proof.mac), authenticating: data, using: SymmetricKey(data: key))
            guard valid else {
                return fail(.meshKeyMismatch, "mesh key mismatch: the peer's proof does not match this node's mesh key")
            }
        }
        state = .established
        let identity = PeerIdentity(
            siteID: peerSite, name: hello.nodeName, role: PeerRole(hello.role), listenAddress: hello.listenAddress,
            version: min(hello.maxVersion, configuration.versions.upperBound),
            limits: PeerLimits(
                maximumFrameSize: Int(clamping: hello.maxFrameSize), documentSizeHardLimit: Int(clamping: hello.documentSizeHardLimit)))
        return [.established(identity)]
    }

    static func proofInput(receiverNonce: [UInt8], senderNonce: [UInt8], sender: SiteID) -> [UInt8] {
        var data = proofLabel
        data += receiverNonce
        data += senderNonce
        withUnsafeBytes(of: sender.rawValue.bigEndian) { data += $0 }
        return data
    }

    /// The proof a sender computes for a receiver's nonce.
    public static func mac(key: [UInt8], receiverNonce: [UInt8], senderNonce: [UInt8], sender: SiteID) -> [UInt8] {
        let code = HMAC<SHA256>.authenticationCode(
            for: proofInput(receiverNonce: receiverNonce, senderNonce: senderNonce, sender: sender),
            using: SymmetricKey(data: key))
        return Array(code)
    }
}
