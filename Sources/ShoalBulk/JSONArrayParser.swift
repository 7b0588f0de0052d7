/// Reads one JSON array of objects, element by element, so that an array larger
/// than memory streams like NDJSON does.
///
/// It only finds where each top-level element ends (a `,` or the closing `]` outside
/// any string, object or array); `JSON.parse` then reads the element. An element's line
/// is the line of its first byte.
///
/// ```
/// [ {"a": 1},        <- element at line 1
///   {"b": "x,]"} ]   <- element at line 2; the , and ] inside the string are text
/// ```
struct JSONArrayParser {
    private enum State { case beforeArray, beforeElement, inElement, afterArray, stopped }

    private var state = State.beforeArray
    private var line = 1
    private var element: [UInt8] = []
    private var elementLine = 1
    private var tooLong = false
    private var depth = 0
    private var inString = false
    private var escaped = false
    /// Whether the last element ended with a `,`, so a `]` now is a trailing comma.
    private var afterComma = false

    mutating func feed(_ bytes: ArraySlice<UInt8>, into out: inout [ImportRecord]) {
        for byte in bytes {
            consume(byte, into: &out)
            if byte == 0x0A { line += 1 }
        }
    }

    mutating func finish(into out: inout [ImportRecord]) {
        switch state {
        case .beforeArray, .afterArray, .stopped:
            return
        case .inElement:
            endElement(into: &out)
            fallthrough
        case .beforeElement:
            out.append(.bad(line: line, message: "the file ends before the array's closing ']'"))
        }
        state = .stopped
    }

    private mutating func consume(_ byte: UInt8, into out: inout [ImportRecord]) {
        switch state {
        case .beforeArray:
            if byte.isJSONWhitespace { return }
            if byte == UInt8(ascii: "[") {
                state = .beforeElement
            } else {
                out.append(.fatal(line: line, message: "a JSON array must start with '['"))
                state = .stopped
            }
        case .beforeElement:
            if byte.isJSONWhitespace { return }
            switch byte {
            case UInt8(ascii: "]"):
                if afterComma { out.append(.bad(line: line, message: "expected an object after ',', found ']'")) }
                state = .afterArray
            case UInt8(ascii: ","):
                out.append(.bad(line: line, message: "expected an object before ','"))
                afterComma = true
            default:
                elementLine = line
                state = .inElement
                consumeInElement(byte, into: &out)
            }
        case .inElement:
            consumeInElement(byte, into: &out)
        case .afterArray:
            if byte.isJSONWhitespace { return }
            out.append(.bad(line: line, message: "text after the array's closing ']'"))
            state = .stopped
        case .stopped:
            return
        }
    }

    private mutating func consumeInElement(_ byte: UInt8, into out: inout [ImportRecord]) {
        if inString {
            if escaped {
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else if byte == UInt8(ascii: "\"") {
                inString = false
            }
            append(byte)
            return
        }
        switch byte {
        case UInt8(ascii: "\""):
            inString = true
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            depth += 1
        case UInt8(ascii: "}"):
            // Never below 0: a stray '}' stays in this element, which then fails to
            // parse, rather than swallowing the elements after it.
            depth = max(0, depth - 1)
        case UInt8(ascii: "]") where depth == 0:
            endElement(into: &out)
            state = .afterArray
            return
        case UInt8(ascii: "]"):
            depth -= 1
        case UInt8(ascii: ",") where depth == 0:
            endElement(into: &out)
            afterComma = true
            state = .beforeElement
            return
        default:
            break
        }
        append(byte)
    }

    private mutating func append(_ byte: UInt8) {
        guard !tooLong else { return }
        if element.count == maximumRecordBytes {
            tooLong = true
            element.removeAll()
        } else {
            element.append(byte)
        }
    }

    private mutating func endElement(into out: inout [ImportRecord]) {
        if tooLong {
            out.append(.bad(line: elementLine, message: "the element is longer than \(maximumRecordBytes >> 20) MiB"))
        } else {
            out.append(documentRecord(element, line: elementLine))
        }
        element.removeAll(keepingCapacity: element.count < 1 << 20)
        tooLong = false
        depth = 0
        inString = false
        escaped = false
        afterComma = false
    }
}
