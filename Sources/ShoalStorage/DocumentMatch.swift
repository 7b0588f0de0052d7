package import ShoalCRDT
package import ShoalQuery

/// Which candidate documents a statement's WHERE, ORDER BY, LIMIT and OFFSET pick, with
/// DQL's exact semantics, the same on every engine: the engine reads candidates (every
/// live document of the collection, or fewer by a pre-filter), in key order or the
/// order its pre-filter gives, and offers them here one by one; `finish` orders and cuts.
///
/// Without ORDER BY, the first `offset + limit` matches are the answer, so the engine
/// stops reading once `wantsMore` is false. A key that fails the predicate's own `_id`
/// comparisons is passed over before its body is read.
package struct DocumentMatch {
    let predicate: Expression?
    let orderBy: [OrderTerm]
    let arguments: [String: Value]
    let skip: Int
    let take: Int?
    /// How many matches are enough (without ORDER BY, with a LIMIT); nil for all.
    package let enough: Int?
    /// The predicate's comparisons of `_id` alone, checked on a key before its body is read.
    let idCheck: Expression?
    private var matches: [(key: String, body: Value)] = []

    package init(
        predicate: Expression?, orderBy: [OrderTerm] = [], limit: Expression? = nil, offset: Expression? = nil,
        arguments: [String: Value]
    ) throws(ShoalError) {
        let skip: Int
        let take: Int?
        do throws(QueryError) {
            skip = try Self.count(offset, arguments: arguments, clause: "OFFSET") ?? 0
            take = try Self.count(limit, arguments: arguments, clause: "LIMIT")
        } catch {
            throw ShoalError(error)
        }
        self.skip = skip
        self.take = take
        self.predicate = predicate
        self.orderBy = orderBy
        self.arguments = arguments
        enough = orderBy.isEmpty ? take.map { skip.addingReportingOverflow($0).partialValue } : nil
        idCheck = Evaluator.idComparisons(predicate)
    }

    /// Whether another candidate may still be in the answer.
    package var wantsMore: Bool { enough.map { matches.count < $0 } ?? true }

    /// Offers one candidate, its body read through `body` only when its key passes the
    /// `_id` comparisons. A body that cannot be read (one an older version stored past
    /// `DocumentLimits`) is seen as its `_id` alone, so that a statement naming the
    /// document by `_id` can still repair, delete or evict it; with `unreadable`, such a
    /// document is left out instead and its key passed to `unreadable` (what SELECT
    /// does, which has nothing true to show of it).
    package mutating func offer(key: String, body: () throws -> String, unreadable: ((String) -> Void)? = nil) throws {
        if let idCheck, let id = try? JSON.parse(key), !(try satisfies(idCheck, .object(["_id": id]))) { return }
        let document: Value
        if let parsed = try? JSON.parse(try body()) {
            document = parsed
        } else {
            guard let id = try? JSON.parse(key) else { return }
            if let unreadable {
                if try satisfies(predicate, .object(["_id": id])) { unreadable(key) }
                return
            }
            document = .object(["_id": id])
        }
        if try satisfies(predicate, document) { matches.append((key, document)) }
    }

    /// Offers a candidate whose body is parsed already.
    package mutating func offer(key: String, document: Value) throws(ShoalError) {
        if try satisfies(predicate, document) { matches.append((key, document)) }
    }

    private func satisfies(_ predicate: Expression?, _ document: Value) throws(ShoalError) -> Bool {
        do {
            return try Evaluator.matches(predicate, document: document, arguments: arguments)
        } catch {
            throw ShoalError(error)
        }
    }

    /// The matches, ordered by ORDER BY (stable: candidates' order among equals) and
    /// cut to OFFSET and LIMIT.
    package func finish() throws(ShoalError) -> [(key: String, body: Value)] {
        var out = matches
        if !orderBy.isEmpty {
            do throws(QueryError) {
                let keyed = try out.map { doc throws(QueryError) in
                    (doc, try orderBy.map { term throws(QueryError) in
                        try Evaluator.evaluate(term.expression, document: doc.body, arguments: arguments) ?? .null
                    })
                }
                out = keyed.sorted { a, b in
                    for (i, term) in orderBy.enumerated() {
                        let c = Value.compare(a.1[i], b.1[i])
                        if c != 0 { return term.descending ? c > 0 : c < 0 }
                    }
                    return false
                }.map(\.0)
            } catch {
                throw ShoalError(error)
            }
        }
        if skip > 0 || take != nil { out = Array(out.dropFirst(skip).prefix(take ?? Int.max)) }
        return out
    }

    /// A LIMIT's or OFFSET's count; nil without the clause.
    package static func count(_ expression: Expression?, arguments: [String: Value], clause: String) throws(QueryError) -> Int? {
        guard let expression else { return nil }
        let value = try Evaluator.evaluate(expression, document: .object([:]), arguments: arguments)
        guard case .int(let n)? = value, n >= 0 else {
            throw QueryError("\(clause) needs a non-negative integer, got \(value.map { $0.canonicalJSON } ?? "nothing")")
        }
        return Int(n)
    }

    /// Whether a SELECT is `COUNT(*)` alone, which reads every match and orders none.
    package static func isCount(_ select: SelectStatement) -> Bool {
        select.projection.count == 1 && select.projection[0].expression == .countAll
    }

    /// The items a SELECT returns of its matching `documents`: their count, each whole,
    /// or as its SELECT list says.
    package static func items(_ documents: [Value], _ select: SelectStatement, arguments: [String: Value]) throws(ShoalError) -> [Value] {
        if isCount(select) { return [.object([select.projection[0].name: .int(Int64(documents.count))])] }
        guard !select.projection.isEmpty else { return documents }
        do {
            return try documents.map { doc throws(QueryError) in
                var out: [String: Value] = [:]
                for item in select.projection {
                    if let v = try Evaluator.evaluate(item.expression, document: doc, arguments: arguments) {
                        out[item.name] = v
                    }
                }
                return .object(out)
            }
        } catch {
            throw ShoalError(error)
        }
    }
}
