public import NIOCore
import CompressNIO
import SwiftProtobuf

/// Turns messages into frames and back, compressing large payloads.
///
/// Compression is per frame: a payload of at least `compressionThreshold` bytes
/// is deflated (zlib) when that makes it smaller, and the compressed bit set. On
/// receipt the inflated size is capped at `maximumInflatedSize`, so a small frame
/// cannot expand into an unbounded allocation.
public struct MessageCodec: Sendable {
    public var limits: WireLimits

    public init(limits: WireLimits = .default) {
        self.limits = limits
    }

    public func encode(_ message: WireMessage, allocator: ByteBufferAllocator = ByteBufferAllocator()) -> Frame {
        let bytes: [UInt8]
        do {
            switch message {
            case .hello(let m): bytes = try m.serializedBytes()
            case .proof(let m): bytes = try m.serializedBytes()
            case .error(let m): bytes = try m.serializedBytes()
            case .ping(let m), .pong(let m): bytes = try m.serializedBytes()
            case .subscribe(let m): bytes = try m.serializedBytes()
            case .deltaBatch(let m): bytes = try m.serializedBytes()
            case .ack(let m): bytes = try m.serializedBytes()
            case .attachmentRequest(let m): bytes = try m.serializedBytes()
            case .attachmentChunk(let m): bytes = try m.serializedBytes()
            case .transactionRequest(let m): bytes = try m.serializedBytes()
            case .transactionPieces(let m): bytes = try m.serializedBytes()
            case .routeUpdate(let m): bytes = try m.serializedBytes()
            case .adminRequest(let m): bytes = try m.serializedBytes()
            case .adminResponse(let m): bytes = try m.serializedBytes()
            }
        } catch {
            // Serialization fails only for messages missing required fields, which proto3 has none of.
            preconditionFailure("protobuf serialization failed: \(error)")
        }
        return encode(message.type, payload: bytes, allocator: allocator)
    }

    /// zlib at level 1: about half the time of the default level 6 on a batch, for a
    /// payload about a tenth larger (PROTOCOL.md, "Compression").
    static let deflate = CompressionAlgorithm.zlib(configuration: ZlibConfiguration(compressionLevel: 1))

    /// The frame of a message of `type` whose payload is serialized already
    /// (`bytes`), compressed as `encode(_:)` compresses.
    public func encode(_ type: MessageType, payload bytes: [UInt8], allocator: ByteBufferAllocator = ByteBufferAllocator()) -> Frame {
        let payload = allocator.buffer(bytes: bytes)
        if bytes.count >= limits.compressionThreshold {
            var input = payload
            if let compressed = try? input.compress(with: Self.deflate, allocator: allocator), compressed.readableBytes < bytes.count {
                return Frame(type: type, flags: .compressed, payload: compressed)
            }
        }
        return Frame(type: type, payload: payload)
    }

    /// Decodes a frame's payload as the message its type names.
    public func decode(_ frame: Frame) throws(WireError) -> WireMessage {
        let (type, payload) = try payload(frame)
        return try decode(type, payload)
    }

    /// A frame's type and its payload, inflated (with the cap) if it came compressed.
    public func payload(_ frame: Frame) throws(WireError) -> (MessageType, ByteBuffer) {
        guard let type = MessageType(rawValue: frame.type) else {
            throw WireError(.unknownMessageType, "unknown message type 0x\(hex(frame.type))")
        }
        var payload = frame.payload
        if frame.flags.contains(.compressed) {
            // Made only when a frame goes beyond the limit (it is a message to format).
            func beyond() -> WireError {
                WireError(.decompressionFailed, "\(type) frame inflates beyond the limit of \(limits.maximumInflatedSize) bytes")
            }
            do {
                // CompressNIO stops at `maxSize` only roughly (its buffers' capacities round
                // up), so ask for one byte more than the cap and check the size exactly.
                payload = try payload.decompress(with: .zlib(), maxSize: min(limits.maximumInflatedSize, .max - 1) + 1)
            } catch let error as CompressNIOError where error == .bufferOverflow {
                throw beyond()
            } catch {
                throw WireError(.decompressionFailed, "\(type) frame: compressed payload is corrupt (\(error))")
            }
            guard payload.readableBytes <= limits.maximumInflatedSize else { throw beyond() }
        }
        return (type, payload)
    }

    /// Decodes a payload, inflated already, as the message `type` names.
    public func decode(_ type: MessageType, _ payload: ByteBuffer) throws(WireError) -> WireMessage {
        let bytes = payload.readableBytesView
        do {
            switch type {
            case .hello: return .hello(try Shoal_V1_Hello(serializedBytes: Array(bytes)))
            case .proof: return .proof(try Shoal_V1_Proof(serializedBytes: Array(bytes)))
            case .error: return .error(try Shoal_V1_Error(serializedBytes: Array(bytes)))
            case .ping: return .ping(try Shoal_V1_Ping(serializedBytes: Array(bytes)))
            case .pong: return .pong(try Shoal_V1_Ping(serializedBytes: Array(bytes)))
            case .subscribe: return .subscribe(try Shoal_V1_Subscribe(serializedBytes: Array(bytes)))
            case .deltaBatch: return .deltaBatch(try Shoal_V1_DeltaBatch(serializedBytes: Array(bytes)))
            case .ack: return .ack(try Shoal_V1_Ack(serializedBytes: Array(bytes)))
            case .attachmentRequest: return .attachmentRequest(try Shoal_V1_AttachmentRequest(serializedBytes: Array(bytes)))
            case .attachmentChunk: return .attachmentChunk(try Shoal_V1_AttachmentChunk(serializedBytes: Array(bytes)))
            case .transactionRequest: return .transactionRequest(try Shoal_V1_TransactionRequest(serializedBytes: Array(bytes)))
            case .transactionPieces: return .transactionPieces(try Shoal_V1_TransactionPieces(serializedBytes: Array(bytes)))
            case .routeUpdate: return .routeUpdate(try Shoal_V1_RouteUpdate(serializedBytes: Array(bytes)))
            case .adminRequest: return .adminRequest(try Shoal_V1_AdminRequest(serializedBytes: Array(bytes)))
            case .adminResponse: return .adminResponse(try Shoal_V1_AdminResponse(serializedBytes: Array(bytes)))
            }
        } catch {
            throw WireError(.malformedPayload, "\(type) frame: payload is not a valid \(type) message (\(error))")
        }
    }
}
