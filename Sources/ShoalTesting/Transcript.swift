public import ShoalCRDT

/// A session transcript of the conformance kit (`Protocol/vectors/*/*.transcript`,
/// PROTOCOL.md §15.6): one node's side of a session, frames in and out, with the
/// local events between them. Read here for the tests that replay one, and written
/// here by the scenarios that record one from the node's own code.
///
/// ```
/// # comment             version N         site SITE        peer SITE
/// limits FRAME DOC      own QUERY         cursor N         log N
/// page HEX              tick MICROS       durable          closed
/// > HEX                 < HEX             <~ FIELD,… HEX
/// ```
public struct Transcript: Sendable {
    public enum Line: Sendable, Equatable {
        /// The protocol version the handshake agreed.
        case version(UInt32)
        /// The node whose side this is.
        case site(SiteID)
        /// The other side (0 for an admin client).
        case peer(SiteID)
        /// What the other side said it takes in its Hello: frame payload and document bytes.
        case limits(frame: Int, document: Int)
        /// One of the node's own subscriptions.
        case own(String)
        /// The cursor the node holds for its set on the peer's log, as it reads it.
        case cursor(UInt64)
        /// The node's change log now ends at this sequence.
        case log(UInt64)
        /// The node's store answers its page read: a DeltaBatch payload (not a frame)
        /// holding the page's pieces, in the session's encoding, and its `through_sequence`.
        case page([UInt8])
        /// The node's session clock reaches this many microseconds.
        case tick(UInt64)
        /// The oldest batch the node received and has not acknowledged is durable.
        case durable
        /// A frame the node receives.
        case received([UInt8])
        /// The next frame the node sends: exactly these bytes (a compressed payload
        /// compared inflated) when `except` is empty; otherwise the same message once the
        /// fields at these paths are taken out.
        case sent([UInt8], except: [String])
        /// The node closes the connection.
        case closed
    }

    public var lines: [(number: Int, line: Line)] = []

    public init() {}

    /// Reads a transcript; a line that follows no format throws, naming it.
    public init(parsing text: String) throws(KitError) {
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if raw.isEmpty || raw.hasPrefix("#") { continue }
            let word = raw.prefix { $0 != " " }
            let rest = raw.dropFirst(word.count + 1)
            let number = index + 1
            func integer() throws(KitError) -> UInt64 {
                guard let value = UInt64(rest) else { throw KitError("line \(number): expected a number: \(raw)") }
                return value
            }
            func site() throws(KitError) -> SiteID {
                guard rest.count == 16, let site = SiteID(hex: rest) else { throw KitError("line \(number): expected 16 hex digits: \(raw)") }
                return site
            }
            let line: Line
            switch word {
            case "version": line = .version(UInt32(try integer()))
            case "site": line = .site(try site())
            case "peer": line = .peer(try site())
            case "limits":
                let parts = rest.split(separator: " ").compactMap { Int($0) }
                guard parts.count == 2 else { throw KitError("line \(number): expected two numbers: \(raw)") }
                line = .limits(frame: parts[0], document: parts[1])
            case "own": line = .own(String(rest))
            case "cursor": line = .cursor(try integer())
            case "log": line = .log(try integer())
            case "page": line = .page(try VectorManifest.bytes(hexPairs: rest))
            case "tick": line = .tick(try integer())
            case "durable": line = .durable
            case "closed": line = .closed
            case ">": line = .received(try VectorManifest.bytes(hexPairs: rest))
            case "<": line = .sent(try VectorManifest.bytes(hexPairs: rest), except: [])
            case "<~":
                let fields = rest.prefix { $0 != " " }
                line = .sent(
                    try VectorManifest.bytes(hexPairs: rest.dropFirst(fields.count + 1)),
                    except: fields.split(separator: ",").map(String.init))
            default: throw KitError("line \(number): unknown line: \(raw.prefix(60))")
            }
            lines.append((number, line))
        }
    }

    /// The header's value, when the transcript has one.
    public var version: UInt32? {
        for case .version(let v) in lines.map(\.line) { return v }
        return nil
    }

    /// Writes a transcript: comments and lines, in order.
    public struct Writer: Sendable {
        public private(set) var text = ""

        public init() {}

        public mutating func comment(_ text: String) {
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) { self.text += "# \(line)\n" }
        }

        public mutating func line(_ line: Line) {
            text += Self.render(line) + "\n"
        }

        static func render(_ line: Line) -> String {
            switch line {
            case .version(let v): "version \(v)"
            case .site(let s): "site \(s)"
            case .peer(let s): "peer \(s)"
            case .limits(let frame, let document): "limits \(frame) \(document)"
            case .own(let q): "own \(q)"
            case .cursor(let n): "cursor \(n)"
            case .log(let n): "log \(n)"
            case .page(let bytes): "page \(VectorManifest.hexPairs(bytes))"
            case .tick(let t): "tick \(t)"
            case .durable: "durable"
            case .received(let bytes): "> \(VectorManifest.hexPairs(bytes))"
            case .sent(let bytes, let except) where except.isEmpty: "< \(VectorManifest.hexPairs(bytes))"
            case .sent(let bytes, let except): "<~ \(except.joined(separator: ",")) \(VectorManifest.hexPairs(bytes))"
            case .closed: "closed"
            }
        }
    }
}
