#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
public import Darwin
#endif

/// Reads lines from a terminal with editing and history, like a small readline.
///
/// While it reads a line the terminal is in raw mode (no echo, no line buffering,
/// no signals from Ctrl-C); it is restored before `readLine` returns. Keys:
/// Left/Right (Ctrl-B/F), Home/End (Ctrl-A/E), Backspace, Delete, Up/Down (Ctrl-P/N)
/// through the history, Ctrl-K/U/W to cut, Ctrl-L to clear the screen, Ctrl-C to
/// drop the line, Ctrl-D to end the input on an empty line.
///
/// Every character counts as one column, and a line longer than the terminal is
/// redrawn as if it were not: enough for statements typed by hand.
public final class LineEditor {
    /// What one `readLine` got.
    public enum Input: Sendable, Hashable {
        case line(String)
        /// Ctrl-C: the line was dropped.
        case interrupted
        /// Ctrl-D on an empty line, or the terminal closed.
        case end
    }

    public private(set) var history: History
    let input: Int32
    let output: Int32

    public init(history: History, input: Int32 = 0, output: Int32 = 1) {
        self.history = history
        self.input = input
        self.output = output
    }

    /// Whether standard input is a terminal (else the shell reads plain lines).
    public static var standardInputIsTerminal: Bool { isatty(0) == 1 }

    /// Reads one line after showing `prompt`; entered lines join the history.
    public func readLine(prompt: String) throws(ShellError) -> Input {
        var saved = termios()
        guard tcgetattr(input, &saved) == 0 else { throw ShellError("standard input is not a terminal") }
        var raw = saved
        raw.c_iflag &= ~tcflag_t(ICRNL | IXON | BRKINT | INPCK | ISTRIP)
        raw.c_lflag &= ~tcflag_t(ECHO | ICANON | ISIG | IEXTEN)
        raw.c_cflag |= tcflag_t(CS8)
        guard tcsetattr(input, TCSAFLUSH, &raw) == 0 else { throw ShellError("cannot put the terminal in raw mode") }
        defer { _ = tcsetattr(input, TCSAFLUSH, &saved) }

        var buffer = EditBuffer()
        var decoder = KeyDecoder()
        draw(prompt, buffer)
        while true {
            var byte: UInt8 = 0
            let n = read(input, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            guard n == 1 else {
                emit("\r\n")
                return .end
            }
            guard let key = decoder.feed(byte) else { continue }
            switch key {
            case .enter:
                emit("\r\n")
                history.add(buffer.text)
                return .line(buffer.text)
            case .interrupt:
                emit("^C\r\n")
                history.add("")  // ends browsing
                return .interrupted
            case .endOfInput:
                if buffer.characters.isEmpty {
                    emit("\r\n")
                    return .end
                }
                buffer.deleteForward()
            case .text(let text): buffer.insert(text)
            case .backspace: buffer.deleteBackward()
            case .delete: buffer.deleteForward()
            case .left: buffer.moveLeft()
            case .right: buffer.moveRight()
            case .home: buffer.moveHome()
            case .end: buffer.moveEnd()
            case .killToEnd: buffer.killToEnd()
            case .killToStart: buffer.killToStart()
            case .deleteWord: buffer.deleteWordBackward()
            case .up:
                if let line = history.previous(current: buffer.text) { buffer.replace(with: line) }
            case .down:
                if let line = history.next() { buffer.replace(with: line) }
            case .clearScreen: emit("\u{1B}[H\u{1B}[2J")
            case .ignored: continue
            }
            draw(prompt, buffer)
        }
    }

    /// Redraws the line: back to column 0, prompt and text, clear the rest, cursor in place.
    private func draw(_ prompt: String, _ buffer: EditBuffer) {
        // A recalled entry may hold newlines (a statement typed over several lines): show them as spaces.
        let shown = String(buffer.characters.map { $0.isNewline ? " " : $0 })
        var out = "\r" + prompt + shown + "\u{1B}[K"
        let back = buffer.characters.count - buffer.cursor
        if back > 0 { out += "\u{1B}[\(back)D" }
        emit(out)
    }

    private func emit(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { write(output, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            bytes = bytes.dropFirst(n)
        }
    }
}
