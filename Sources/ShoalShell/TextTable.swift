import Foundation
public import ShoalCRDT

/// Rows of text in aligned columns under a header, as `shoal status` and the
/// shell print them.
public enum TextTable {
    /// Each row indented by two spaces, columns two spaces apart; "(none)" for no rows.
    public static func render(_ header: [String], _ rows: [[String]]) -> String {
        if rows.isEmpty { return "  (none)\n" }
        let all = [header] + rows
        let widths = header.indices.map { i in all.map { $0[i].count }.max() ?? 0 }
        return all.map { row in
            "  " + row.enumerated().map { i, cell in
                i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count)
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }

    /// Result documents as a table: one column per top-level field (`_id` first, then
    /// by name), one row per document, strings as they are and other values as JSON;
    /// a field a document lacks is left empty. A result that is not a document shows
    /// in a column `value`.
    public static func render(documents: [Value]) -> String {
        var fields = Set<String>()
        var bare = false
        for document in documents {
            if case .object(let object) = document { fields.formUnion(object.keys) } else { bare = true }
        }
        let columns = fields.sorted { ($0 == "_id" ? 0 : 1, $0) < ($1 == "_id" ? 0 : 1, $1) } + (bare ? ["value"] : [])
        let rows = documents.map { document -> [String] in
            guard case .object(let object) = document else {
                return columns.map { $0 == "value" && bare ? cell(document) : "" }
            }
            return columns.map { object[$0].map(cell) ?? "" }
        }
        let table = rows.isEmpty ? "" : render(columns, rows)
        return table + "(\(documents.count) \(documents.count == 1 ? "row" : "rows"))\n"
    }

    /// A value in a cell: a string bare, newlines shown as `\n`; anything else as canonical JSON.
    static func cell(_ value: Value) -> String {
        if case .string(let s) = value { return s.replacingOccurrences(of: "\n", with: "\\n") }
        return value.canonicalJSON
    }
}
