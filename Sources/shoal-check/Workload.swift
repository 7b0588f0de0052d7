import Foundation
import ShoalStorage
import ShoalCRDT
import ShoalCheck
import ShoalNode
import ShoalSync
import ShoalTesting

/// The kinds of operation a run sends, by the names `--ops` takes.
enum OperationKind: String, CaseIterable, Sendable {
    /// `INSERT INTO reg DOCUMENTS (:d) ON ID CONFLICT DO UPDATE`: one or two fields.
    case upsert
    /// `UPDATE reg SET f = :t WHERE _id = :id`.
    case update
    /// `UPDATE reg UNSET f WHERE _id = :id`.
    case unset
    /// `DELETE FROM reg WHERE _id = :id`.
    case delete
    /// `UPDATE ct APPLY n INCREMENT BY :x SET w = :t WHERE _id = :id`.
    case counter
    /// `UPDATE COLLECTION mp (m MAP) SET m.k = :t` or `UNSET m.k`.
    case map
    /// BEGIN, two to four writes over several documents and collections, COMMIT.
    case transaction
    /// An attachment put, then its token upserted into an `att` document.
    case attachment
    /// A `big` document of 20 to 400 KiB.
    case big
    /// `EVICT FROM c WHERE _id = :id`, or a whole collection.
    case evict
    /// `UPDATE reg SET d.x.x… = 1` with a path 126 to 130 levels deep.
    case deep

    /// The known bug this kind finds on the code as it is, not fixed yet: `--skip-known`
    /// leaves it out, as CI does. Remove the entry with the fix, so CI runs the kind again.
    var knownBug: String? {
        switch self {
        default: nil
        }
    }

    /// How often each is chosen, relative to the others.
    var weight: Int {
        switch self {
        case .upsert: 10
        case .update: 8
        case .unset: 3
        case .delete: 2
        case .counter: 8
        case .map: 8
        case .transaction: 8
        case .attachment: 2
        case .big: 2
        case .evict: 1
        case .deep: 1
        }
    }
}

/// One statement of an operation, with what it writes if it runs.
struct Statement: Sendable {
    var text: String
    var arguments: Value
    /// The document it writes, which `mutatedDocumentIDs` confirms.
    var document: String
    var writes: [Slot: SlotValue]
    var increments: [Slot: Int64] = [:]
    /// Whether it writes whenever it runs (an upsert), or only if its node holds the document.
    var always: Bool
}

/// Builds random operations and sends them, recording each with its outcome.
struct Workload: Sendable {
    let universe: Universe
    let kinds: [OperationKind]
    let cluster: Cluster
    let recorder: Recorder

    /// Picks an operation kind by weight.
    func pick(_ random: inout SplitMix) -> OperationKind {
        let total = kinds.reduce(0) { $0 + $1.weight }
        var roll = Int.random(in: 0..<total, using: &random)
        for kind in kinds {
            roll -= kind.weight
            if roll < 0 { return kind }
        }
        return kinds[0]
    }

    private func document(_ collection: String, _ random: inout SplitMix) -> String {
        universe.collection(named: collection)!.documents.randomElement(using: &random)!
    }

    private static func quoted(_ id: String) -> String { Value.string(id).canonicalJSON }

    // MARK: statements

    private func upsert(_ token: String, _ random: inout SplitMix) -> Statement {
        let doc = document("reg", &random)
        let fields = Array(["f0", "f1", "f2"].shuffled(using: &random).prefix(Int.random(in: 1...2, using: &random)))
        var body: [String: Value] = ["_id": .string(doc)]
        for field in fields { body[field] = .string(token) }
        return Statement(
            text: "INSERT INTO reg DOCUMENTS (:d) ON ID CONFLICT DO UPDATE", arguments: ["d": .object(body)], document: doc,
            writes: Dictionary(uniqueKeysWithValues: fields.map { (Slot(doc, $0), .token(token)) }), always: true)
    }

    private func mapWrite(_ token: String, unset: Bool, _ random: inout SplitMix) -> Statement {
        let doc = document("mp", &random)
        let key = Universe.mapKeys.randomElement(using: &random)!
        let slot = Slot(doc, "m.\(key)")
        if unset {
            return Statement(
                text: "UPDATE COLLECTION mp (m MAP) UNSET m.\(key) WHERE _id = :id", arguments: ["id": .string(doc)],
                document: doc, writes: [slot: .absent], always: false)
        }
        return Statement(
            text: "UPDATE COLLECTION mp (m MAP) SET m.\(key) = :t WHERE _id = :id",
            arguments: ["id": .string(doc), "t": .string(token)], document: doc, writes: [slot: .token(token)], always: false)
    }

    private func increment(_ token: String, _ random: inout SplitMix) -> Statement {
        let doc = document("ct", &random)
        let amount = Int64.random(in: -3...9, using: &random)
        return Statement(
            text: "UPDATE ct APPLY n INCREMENT BY :x SET w = :t WHERE _id = :id",
            arguments: ["id": .string(doc), "t": .string(token), "x": .int(amount)], document: doc,
            writes: [Slot(doc, "w"): .token(token)], increments: [Slot(doc, "n"): amount], always: false)
    }

    /// The statements of one operation of `kind`.
    private func statements(_ kind: OperationKind, _ token: String, _ random: inout SplitMix) -> [Statement] {
        switch kind {
        case .upsert:
            return [upsert(token, &random)]
        case .update:
            let doc = document("reg", &random)
            let field = ["f0", "f1", "f2"].randomElement(using: &random)!
            return [
                Statement(
                    text: "UPDATE reg SET \(field) = :t WHERE _id = :id", arguments: ["id": .string(doc), "t": .string(token)],
                    document: doc, writes: [Slot(doc, field): .token(token)], always: false)
            ]
        case .unset:
            let doc = document("reg", &random)
            let field = ["f0", "f1", "f2"].randomElement(using: &random)!
            return [
                Statement(
                    text: "UPDATE reg UNSET \(field) WHERE _id = :id", arguments: ["id": .string(doc)], document: doc,
                    writes: [Slot(doc, field): .absent], always: false)
            ]
        case .delete:
            let doc = document("reg", &random)
            return [
                Statement(
                    text: "DELETE FROM reg WHERE _id = :id", arguments: ["id": .string(doc)], document: doc,
                    writes: Dictionary(uniqueKeysWithValues: ["f0", "f1", "f2"].map { (Slot(doc, $0), SlotValue.absent) }),
                    always: false)
            ]
        case .counter:
            return [increment(token, &random)]
        case .map:
            return [mapWrite(token, unset: Int.random(in: 0..<4, using: &random) == 0, &random)]
        case .transaction:
            var result: [Statement] = []
            var documents: Set<String> = []
            for _ in 0..<Int.random(in: 2...4, using: &random) {
                let statement =
                    switch Int.random(in: 0..<3, using: &random) {
                    case 0: upsert(token, &random)
                    case 1: mapWrite(token, unset: false, &random)
                    default: increment(token, &random)
                    }
                // One statement per document: a second would overwrite the first's slots.
                if documents.insert(statement.document).inserted { result.append(statement) }
            }
            return result
        case .big:
            let doc = document("big", &random)
            let size = Int.random(in: 20_000...400_000, using: &random)
            let body: Value = ["_id": .string(doc), "v": ["t": .string(token), "pad": .string(String(repeating: "x", count: size))]]
            return [
                Statement(
                    text: "INSERT INTO big DOCUMENTS (:d) ON ID CONFLICT DO UPDATE", arguments: ["d": body], document: doc,
                    writes: [Slot(doc, "v"): .token(token)], always: true)
            ]
        case .deep:
            let doc = document("reg", &random)
            let depth = Int.random(in: 126...130, using: &random)
            let path = (["d"] + Array(repeating: "x", count: depth - 1)).joined(separator: ".")
            return [
                Statement(
                    text: "UPDATE reg SET \(path) = :t WHERE _id = :id", arguments: ["id": .string(doc), "t": .string(token)],
                    document: doc, writes: [:], always: false)
            ]
        case .attachment, .evict:
            return []
        }
    }

    // MARK: sending

    /// Sends one random operation to node `node`, records it, and returns its kind.
    @discardableResult
    func perform(on node: Int, _ random: inout SplitMix) async -> OperationKind {
        var kind = pick(&random)
        // A hub holds the data of the devices behind it: EVICT is not run there.
        if kind == .evict && cluster.nodes[node].isHub {
            guard kinds.contains(where: { $0 != .evict }) else { return kind }
            while kind == .evict { kind = pick(&random) }
        }
        let (id, token) = recorder.nextToken()
        switch kind {
        case .evict:
            await evict(on: node, id: id, token: token, &random)
        case .attachment:
            await attach(on: node, id: id, token: token, &random)
        default:
            await send(statements(kind, token, &random), kind: kind, on: node, id: id, token: token)
        }
        return kind
    }

    /// Sends statements as one transaction: one exec for a single statement, BEGIN …
    /// COMMIT on one connection for several, so each statement's answer says what it wrote.
    func send(_ statements: [Statement], kind: OperationKind, on node: Int, id: Int, token: String) async {
        let sent = Moment(node: node, epoch: cluster.epoch(node), time: recorder.now())
        let text = statements.map(\.text).joined(separator: "; ")
        let client = cluster.client(node)
        let committing = Locked(false)
        var writes: [Slot: SlotValue] = [:]
        var increments: [Slot: Int64] = [:]
        var uncertain: Set<Slot> = []
        for statement in statements {
            writes.merge(statement.writes) { $1 }
            increments.merge(statement.increments) { $1 }
            if !statement.always {
                uncertain.formUnion(statement.writes.keys)
                uncertain.formUnion(statement.increments.keys)
            }
        }
        func record(_ outcome: Mutation.Outcome, transactionID: String? = nil, writes: [Slot: SlotValue], increments: [Slot: Int64], uncertain: Set<Slot>) {
            recorder.record(
                Mutation(
                    id: id, kind: kind.rawValue, sent: sent, acknowledgedAt: outcome == .acknowledged ? recorder.now() : nil,
                    outcome: outcome, transactionID: transactionID, token: token, writes: writes, uncertain: uncertain,
                    increments: increments, text: text))
        }
        do {
            let answers: (mutated: [[String]], transactionID: String?)
            if statements.count == 1 {
                let statement = statements[0]
                committing.withLock { $0 = true }
                let result = try await withTimeout(10) {
                    try await client.exec(statement.text, argumentsJSON: statement.arguments.canonicalJSON)
                }
                answers = ([result.mutatedDocumentIDs], result.transactionID)
            } else {
                answers = try await withTimeout(15) {
                    try await client.withSession { session in
                        _ = try await session.begin(hint: "shoal-check \(token)")
                        var mutated: [[String]] = []
                        for statement in statements {
                            mutated.append(
                                try await session.exec(statement.text, argumentsJSON: statement.arguments.canonicalJSON)
                                    .mutatedDocumentIDs)
                        }
                        committing.withLock { $0 = true }
                        return (mutated, try await session.commit().transactionID)
                    }
                }
            }
            // What each statement's answer says it wrote.
            var done: [Slot: SlotValue] = [:]
            var added: [Slot: Int64] = [:]
            for (statement, mutated) in zip(statements, answers.mutated) where mutated.contains(Self.quoted(statement.document)) {
                done.merge(statement.writes) { $1 }
                added.merge(statement.increments) { $1 }
            }
            record(.acknowledged, transactionID: answers.transactionID, writes: done, increments: added, uncertain: [])
        } catch let error as ShoalError where error.code == .requestFailed {
            record(.refused, writes: writes, increments: increments, uncertain: uncertain)
        } catch {
            // Lost before COMMIT was sent: the connection's end rolled it back.
            let outcome: Mutation.Outcome = committing.withLock { $0 } ? .indeterminate : .refused
            record(outcome, writes: writes, increments: increments, uncertain: uncertain)
        }
    }

    /// An attachment of random bytes put on the node, then its token upserted.
    private func attach(on node: Int, id: Int, token: String, _ random: inout SplitMix) async {
        let doc = document("att", &random)
        let size = Int.random(in: 1...200_000, using: &random)
        var made = [UInt8](repeating: 0, count: size)
        for index in made.indices { made[index] = UInt8.random(in: 0...255, using: &random) }
        made.replaceSubrange(0..<min(size, token.utf8.count), with: Array(token.utf8.prefix(size)))
        let bytes = made
        let hash = AdminClient.attachmentHash(of: bytes)
        recorder.recordAttachment(token: token, hash: hash)
        let client = cluster.client(node)
        let attachmentToken: Value
        do {
            let json = try await withTimeout(10) {
                try await client.putAttachment(bytes, metadataJSON: Value.object(["w": .string(token)]).canonicalJSON)
            }
            attachmentToken = try JSON.parse(json)
        } catch {
            // Nothing names the bytes: no write to record.
            recorder.record(
                Mutation(
                    id: id, kind: OperationKind.attachment.rawValue, sent: Moment(node: node, epoch: cluster.epoch(node), time: recorder.now()),
                    acknowledgedAt: nil, outcome: .refused, transactionID: nil, token: token, writes: [:], text: "attachment put"))
            return
        }
        let statement = Statement(
            text: "INSERT INTO COLLECTION att (a ATTACHMENT) DOCUMENTS (:d) ON ID CONFLICT DO UPDATE",
            arguments: ["d": ["_id": .string(doc), "a": attachmentToken]], document: doc, writes: [Slot(doc, "a"): .token(token)],
            always: true)
        await send([statement], kind: .attachment, on: node, id: id, token: token)
    }

    /// EVICT of one document or a whole collection, recorded as an eviction.
    private func evict(on node: Int, id: Int, token: String, _ random: inout SplitMix) async {
        let collection = universe.collections.randomElement(using: &random)!
        let whole = Int.random(in: 0..<3, using: &random) == 0
        let doc = collection.documents.randomElement(using: &random)!
        let text = whole ? "EVICT FROM \(collection.name)" : "EVICT FROM \(collection.name) WHERE _id = :id"
        let arguments: Value = whole ? [:] : ["id": .string(doc)]
        let sent = Moment(node: node, epoch: cluster.epoch(node), time: recorder.now())
        var documents = Set(whole ? collection.documents : [doc])
        var outcome = Mutation.Outcome.indeterminate
        do {
            let result = try await withTimeout(10) { [client = cluster.client(node)] in
                try await client.exec(text, argumentsJSON: arguments.canonicalJSON)
            }
            documents = Set(result.mutatedDocumentIDs.compactMap { try? JSON.parse($0) }.compactMap { value -> String? in
                if case .string(let id) = value { return id }
                return nil
            })
            outcome = .acknowledged
        } catch let error as ShoalError where error.code == .requestFailed {
            documents = []
            outcome = .refused
        } catch {}
        if !documents.isEmpty { recorder.record(Eviction(at: sent, documents: documents)) }
        recorder.record(
            Mutation(
                id: id, kind: OperationKind.evict.rawValue, sent: sent, acknowledgedAt: outcome == .acknowledged ? recorder.now() : nil,
                outcome: outcome, transactionID: nil, token: token, writes: [:], text: text))
    }

    // MARK: reads

    /// `read` without the collections the node's mid-run reads leave out now
    /// (`Cluster.checkedMidRun`): what is recorded of a read taken of all of them. A
    /// node that dropped a collection holds a transaction that wrote it in part, rightly.
    func recordable(_ read: Read) -> Read {
        let checked = cluster.checkedMidRun(read.node)
        var kept = read
        kept.values = read.values.filter { checked.contains(universe.collection(of: $0.key.document)) }
        kept.counters = read.counters.filter { checked.contains(universe.collection(of: $0.key.document)) }
        return kept
    }

    /// Reads every collection node `node` holds in one read-only transaction (one
    /// snapshot), with the transactions its status says it applied in part.
    func read(_ node: Int, collections: Set<String>, timeout: Double = 15) async throws -> Read {
        let client = cluster.client(node, timeout: timeout)
        let epoch = cluster.epoch(node)
        let started = recorder.now()
        let before = try await client.status()
        let items = try await withTimeout(timeout) {
            try await client.withSession { session in
                _ = try await session.begin(hint: "shoal-check read", readOnly: true)
                var items: [Value] = []
                for collection in collections.sorted() {
                    items += try await session.exec("SELECT * FROM \(collection)").items()
                }
                _ = try await session.commit()
                return items
            }
        }
        let finished = recorder.now()
        let after = try await client.status()
        let (values, counters) = universe.read(items, collections: collections)
        var read = Read(node: node, epoch: epoch, startedAt: started, finishedAt: finished, values: values)
        read.counters = counters
        read.partial = Set((before.transactions.partial + after.transactions.partial).map(\.id))
        return read
    }
}
