/// The line being edited and the cursor in it: every edit the line editor makes,
/// with no terminal, so each can be tested on its own.
///
/// The cursor is an index in `characters`, from 0 (before the first) to
/// `characters.count` (after the last).
public struct EditBuffer: Sendable, Hashable {
    public private(set) var characters: [Character]
    public private(set) var cursor: Int

    public init(_ text: String = "") {
        characters = Array(text)
        cursor = characters.count
    }

    public var text: String { String(characters) }

    public mutating func insert(_ text: String) {
        characters.insert(contentsOf: text, at: cursor)
        cursor += text.count
    }

    /// Removes the character before the cursor (Backspace).
    public mutating func deleteBackward() {
        guard cursor > 0 else { return }
        cursor -= 1
        characters.remove(at: cursor)
    }

    /// Removes the character under the cursor (Delete, Ctrl-D on a non-empty line).
    public mutating func deleteForward() {
        guard cursor < characters.count else { return }
        characters.remove(at: cursor)
    }

    public mutating func moveLeft() { cursor = max(0, cursor - 1) }
    public mutating func moveRight() { cursor = min(characters.count, cursor + 1) }
    public mutating func moveHome() { cursor = 0 }
    public mutating func moveEnd() { cursor = characters.count }

    /// Removes from the cursor to the end of the line (Ctrl-K).
    public mutating func killToEnd() {
        characters.removeSubrange(cursor...)
    }

    /// Removes from the start of the line to the cursor (Ctrl-U).
    public mutating func killToStart() {
        characters.removeSubrange(..<cursor)
        cursor = 0
    }

    /// Removes the word before the cursor and the spaces after it (Ctrl-W).
    public mutating func deleteWordBackward() {
        var start = cursor
        while start > 0 && characters[start - 1].isWhitespace { start -= 1 }
        while start > 0 && !characters[start - 1].isWhitespace { start -= 1 }
        characters.removeSubrange(start..<cursor)
        cursor = start
    }

    /// Replaces the whole line, the cursor at its end (a line recalled from history).
    public mutating func replace(with text: String) {
        self = EditBuffer(text)
    }
}
