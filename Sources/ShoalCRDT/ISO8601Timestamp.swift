#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A `Date` as Shoal writes it in a document: UTC ISO-8601 text to the millisecond.
///
/// Always the same shape, `2024-05-01T12:00:00.000Z`, so that strings of instants
/// sort as the instants do (`ORDER BY made` works, and `made > :since` compares as
/// expected) and any peer reads them. Years before 0000 or after 9999 get a sign and
/// as many digits as they need. Reading takes any fraction of a second (or none) and
/// an offset `±HH:MM` in place of `Z`.
enum ISO8601Timestamp {
    static let millisecondsPerDay: Int64 = 86_400_000

    /// The text of `date`, rounded to the millisecond.
    static func string(from date: Date) -> String {
        let exact = (date.timeIntervalSince1970 * 1000).rounded()
        // Int64 milliseconds reach ±292 million years: beyond them no real date lies.
        let milliseconds = Int64(exactly: exact) ?? (exact < 0 ? Int64.min / 2 : Int64.max / 2)
        var days = milliseconds / millisecondsPerDay
        var rest = milliseconds % millisecondsPerDay
        if rest < 0 {
            days -= 1
            rest += millisecondsPerDay
        }
        let (year, month, day) = civil(days: days)
        var out = year < 0 ? "-" : year > 9999 ? "+" : ""
        out += padded(abs(year), 4) + "-" + padded(month, 2) + "-" + padded(day, 2)
        out += "T" + padded(rest / 3_600_000, 2) + ":" + padded(rest / 60_000 % 60, 2) + ":" + padded(rest / 1000 % 60, 2)
        out += "." + padded(rest % 1000, 3) + "Z"
        return out
    }

    /// The instant `text` names, or `nil` when it is not `YYYY-MM-DDTHH:MM:SS`, an
    /// optional fraction and `Z` or `±HH:MM`, or names no real day or time.
    static func date(from text: String) -> Date? {
        var scanner = Scanner(Array(text.utf8))
        // A year has four digits, or a sign and four or more.
        let signed = scanner.take(["+", "-"])
        let sign: Int64 = signed == UInt8(ascii: "-") ? -1 : 1
        guard let (year, yearDigits) = scanner.number(minimumDigits: 4), yearDigits == 4 || signed != nil,
            scanner.expect("-"), let month = scanner.number(digits: 2), scanner.expect("-"), let day = scanner.number(digits: 2),
            scanner.expect("T"), let hour = scanner.number(digits: 2), scanner.expect(":"),
            let minute = scanner.number(digits: 2), scanner.expect(":"), let second = scanner.number(digits: 2)
        else { return nil }
        var fraction = ""
        if scanner.expect(".") {
            guard let digits = scanner.digits(), !digits.isEmpty else { return nil }
            fraction = digits
        }
        var offset: Int64 = 0
        if let s = scanner.take(["+", "-"]) {
            guard let h = scanner.number(digits: 2), scanner.expect(":"), let m = scanner.number(digits: 2), h < 24, m < 60
            else { return nil }
            offset = (h * 60 + m) * 60 * (s == UInt8(ascii: "-") ? -1 : 1)
        } else if !scanner.expect("Z") {
            return nil
        }
        guard scanner.isAtEnd, (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: sign * year),
            hour < 24, minute < 60, second < 60
        else { return nil }
        let seconds = days(year: sign * year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + second - offset
        // The decimal read whole, as a literal would be, so that a date made from
        // `1714564800.123` and one read from its text are the same double.
        let interval: Double
        if fraction.isEmpty {
            interval = Double(seconds)
        } else if seconds >= 0 {
            interval = Double("\(seconds).\(fraction)")!
        } else {
            interval = Double(seconds) + Double("0.\(fraction)")!
        }
        return Date(timeIntervalSince1970: interval)
    }

    static func padded(_ n: Int64, _ width: Int) -> String {
        let digits = String(n)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a day of the proleptic Gregorian calendar (Howard
    /// Hinnant's `days_from_civil`).
    static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The day `days` after 1970-01-01 (`civil_from_days`).
    static func civil(days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let m = (5 * dayOfYear + 2) / 153
        let month = m < 10 ? m + 3 : m - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, dayOfYear - (153 * m + 2) / 5 + 1)
    }

    struct Scanner {
        var bytes: ArraySlice<UInt8>
        init(_ bytes: [UInt8]) { self.bytes = bytes[...] }

        var isAtEnd: Bool { bytes.isEmpty }

        mutating func expect(_ c: Unicode.Scalar) -> Bool {
            guard bytes.first == UInt8(ascii: c) else { return false }
            bytes.removeFirst()
            return true
        }

        mutating func take(_ options: [Unicode.Scalar]) -> UInt8? {
            guard let b = bytes.first, options.contains(where: { UInt8(ascii: $0) == b }) else { return nil }
            bytes.removeFirst()
            return b
        }

        mutating func digits() -> String? {
            let run = bytes.prefix { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
            bytes.removeFirst(run.count)
            return String(decoding: run, as: UTF8.self)
        }

        mutating func number(digits count: Int) -> Int64? {
            guard let (n, read) = number(minimumDigits: count), read == count else { return nil }
            return n
        }

        /// At least `minimumDigits` digits (at most 9: a year of 9 digits is far past any
        /// date, and its seconds still fit an Int64), and how many there were.
        mutating func number(minimumDigits: Int) -> (Int64, Int)? {
            guard let text = digits(), text.count >= minimumDigits, text.count <= 9 else { return nil }
            return (Int64(text)!, text.count)
        }
    }
}
