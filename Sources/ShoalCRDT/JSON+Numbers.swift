extension JSON {
    /// Why a number cannot be kept as written: taken as the nearest `int` or `double`,
    /// it would become another number, and two distinct numbers (two `_id`s) one.
    public struct InexactNumber: Error, Sendable, Hashable, CustomStringConvertible {
        public enum Reason: Sendable, Hashable {
            /// An integer (no fraction, no exponent) outside Int64.
            case integerOutOfRange
            /// Beyond ±`Double.greatestFiniteMagnitude`: it would be ±∞.
            case beyondDouble
            /// Not 0, but nearer to 0 than any double: it would be 0.
            case belowDouble
            /// More significant digits than the double nearest it: it would be `nearest`.
            case moreDigits
        }

        /// The number as written.
        public var text: String
        public var reason: Reason
        /// The double the number would be read as, when there is one.
        public var nearest: Double?

        public var description: String {
            switch reason {
            case .integerOutOfRange:
                "integer \(text) does not fit in 64 bits (from \(Int64.min) to \(Int64.max))"
            case .beyondDouble:
                "number \(text) is beyond the largest double (±\(Double.greatestFiniteMagnitude))"
            case .belowDouble:
                "number \(text) is closer to 0 than a double can be (it would be read as 0.0)"
            case .moreDigits:
                "number \(text) has more digits than a double keeps: it would be read as \(Value.double(nearest ?? 0).canonicalJSON)"
            }
        }
    }

    /// The value of a JSON number's text (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`):
    /// an `int` when it has no fraction or exponent, else a `double`; refused when
    /// that would not be the number written.
    ///
    /// A double is taken when it is written as a double prints (`1.5`, `0.1`,
    /// `1.2345678901234567e+19`), or as any other text of the same number (`1.50`,
    /// `1E2`): shorter than the double prints it is not possible, longer differs from
    /// it. So distinct numbers that are accepted are distinct values, and a value read
    /// back from its canonical JSON is the value written.
    public static func number(_ text: some Collection<UInt8>, isInteger: Bool) throws(InexactNumber) -> Value {
        let string = String(decoding: text, as: UTF8.self)
        if isInteger {
            guard let i = Int64(string) else {
                throw InexactNumber(text: string, reason: .integerOutOfRange, nearest: Double(string).flatMap { $0.isFinite ? $0 : nil })
            }
            return .int(i)
        }
        guard let d = Double(string), d.isFinite else { throw InexactNumber(text: string, reason: .beyondDouble) }
        let written = Significand(text)
        // Up to 15 significant digits, every decimal in the normal range has a double
        // of its own (DBL_DIG), which prints as that decimal: no need to print it.
        if written.digits.isEmpty || (written.digits.count <= 15 && d.isNormal) { return .double(d) }
        guard written == Significand(Value.double(d).canonicalJSON.utf8) else {
            throw InexactNumber(text: string, reason: d == 0 ? .belowDouble : .moreDigits, nearest: d)
        }
        return .double(d)
    }

    /// A decimal number as its sign, its significant digits (no leading or trailing
    /// zero) and the power of ten that makes them the number after a leading point:
    /// `-0.0120e3` is (true, "12", 2), −0.12 × 10². Texts of one number have equal ones.
    struct Significand: Equatable {
        var negative = false
        var digits: [UInt8] = []
        var exponent = 0

        /// Reads JSON number text, and the shortest form Swift prints a double in.
        init(_ text: some Collection<UInt8>) {
            var rest = text[...]
            if rest.first == UInt8(ascii: "-") {
                negative = true
                rest = rest.dropFirst()
            }
            var point = 0
            var seenPoint = false
            while let byte = rest.first {
                if byte == UInt8(ascii: ".") {
                    seenPoint = true
                } else if (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                    if digits.isEmpty && byte == UInt8(ascii: "0") {
                        // A leading zero moves the point, when after it.
                        if seenPoint { point -= 1 }
                    } else {
                        digits.append(byte)
                        if !seenPoint { point += 1 }
                    }
                } else {
                    break
                }
                rest = rest.dropFirst()
            }
            while digits.last == UInt8(ascii: "0") { digits.removeLast() }
            var power = 0
            if let e = rest.first, e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
                rest = rest.dropFirst()
                var sign = 1
                if rest.first == UInt8(ascii: "-") || rest.first == UInt8(ascii: "+") {
                    if rest.first == UInt8(ascii: "-") { sign = -1 }
                    rest = rest.dropFirst()
                }
                for byte in rest {
                    // Past a trillion the exponent is out of every double's reach anyway.
                    power = min(power * 10 + Int(byte - UInt8(ascii: "0")), 1_000_000_000_000)
                }
                power *= sign
            }
            exponent = digits.isEmpty ? 0 : point + power
        }
    }
}
