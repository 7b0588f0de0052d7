/// A key the line editor acts on.
public enum Key: Sendable, Hashable {
    case text(String)
    case enter
    case backspace
    case delete
    case left, right, up, down, home, end
    case interrupt  // Ctrl-C
    case endOfInput  // Ctrl-D
    case killToEnd  // Ctrl-K
    case killToStart  // Ctrl-U
    case deleteWord  // Ctrl-W
    case clearScreen  // Ctrl-L
    /// A control key or escape sequence the editor ignores.
    case ignored
}

/// Turns the bytes a terminal sends in raw mode into keys, one byte at a time.
///
/// A key can take several bytes (UTF-8 text, `ESC [ A` for Up): `feed` returns nil
/// until the key is whole. Handles the sequences of xterm-like terminals and the
/// Linux console: arrows (`ESC [ A`…, `ESC O A`…), Home and End (`ESC [ H`/`F`,
/// `ESC [ 1 ~`/`4 ~`, `7 ~`/`8 ~`), Delete (`ESC [ 3 ~`).
public struct KeyDecoder: Sendable, Hashable {
    private var pending: [UInt8] = []

    public init() {}

    public mutating func feed(_ byte: UInt8) -> Key? {
        pending.append(byte)
        guard let key = Self.decode(pending) else { return nil }
        pending.removeAll()
        return key
    }

    /// The key `bytes` make, nil if they are the start of a longer one.
    static func decode(_ bytes: [UInt8]) -> Key? {
        guard let first = bytes.first else { return nil }
        switch first {
        case 0x1B:
            return escape(Array(bytes.dropFirst()))
        case 0x0D, 0x0A: return .enter
        case 0x7F, 0x08: return .backspace
        case 0x01: return .home  // Ctrl-A
        case 0x05: return .end  // Ctrl-E
        case 0x02: return .left  // Ctrl-B
        case 0x06: return .right  // Ctrl-F
        case 0x10: return .up  // Ctrl-P
        case 0x0E: return .down  // Ctrl-N
        case 0x03: return .interrupt
        case 0x04: return .endOfInput
        case 0x0B: return .killToEnd
        case 0x15: return .killToStart
        case 0x17: return .deleteWord
        case 0x0C: return .clearScreen
        case 0x09: return .text("  ")  // a tab indents
        case ..<0x20: return .ignored
        default:
            // UTF-8: the first byte says how many follow.
            let length = first < 0x80 ? 1 : first >= 0xF0 ? 4 : first >= 0xE0 ? 3 : first >= 0xC0 ? 2 : 1
            guard bytes.count >= length else { return nil }
            return .text(String(decoding: bytes, as: UTF8.self))
        }
    }

    /// After ESC: `[` or `O`, optional digits, then a final byte.
    static func escape(_ rest: [UInt8]) -> Key? {
        guard let introducer = rest.first else { return nil }
        guard introducer == UInt8(ascii: "[") || introducer == UInt8(ascii: "O") else { return .ignored }
        let body = rest.dropFirst()
        guard let last = body.last else { return nil }
        // Parameters are digits and ';'; anything else ends the sequence.
        if (0x30...0x3F).contains(last) { return body.count > 8 ? .ignored : nil }
        let parameter = String(decoding: body.dropLast(), as: UTF8.self)
        switch (Character(Unicode.Scalar(last)), parameter) {
        case ("A", _): return .up
        case ("B", _): return .down
        case ("C", _): return .right
        case ("D", _): return .left
        case ("H", _): return .home
        case ("F", _): return .end
        case ("~", "1"), ("~", "7"): return .home
        case ("~", "4"), ("~", "8"): return .end
        case ("~", "3"): return .delete
        default: return .ignored
        }
    }
}
