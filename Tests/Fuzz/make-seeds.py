#!/usr/bin/env python3
"""Writes the seed corpora under Tests/Fuzz/Corpus/<target>/ from the frames of the
protocol's conformance kit and a few hand-written inputs. Run again after adding vectors; the output is
committed, so scripts/fuzz.sh needs nothing but Swift."""
import json, os, zlib

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
corpus = os.path.join(here, "Corpus")

def write(target, name, data):
    folder = os.path.join(corpus, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)

# The kit's frames and datagrams (Protocol/vectors/manifest.json lists them), named by
# folder and file: v3-delta-batch. A datagram is no frame, which the decoders must see too.
vectors = os.path.join(root, "Protocol", "vectors")
manifest = json.load(open(os.path.join(vectors, "manifest.json")))
frames = {}
for entry in manifest["vectors"]:
    if entry["kind"] not in ("frame", "datagram"):
        continue
    text = "".join(l for l in open(os.path.join(vectors, entry["file"])) if not l.startswith("#"))
    frames[entry["file"][:-4].replace("/", "-")] = bytes.fromhex(" ".join(text.split()))

# Frame decoder: each frame, all of them in one stream, and a stream cut in the middle.
stream = b"".join(frames.values())
for name, frame in frames.items():
    write("FuzzFrameDecoder", name, frame)
write("FuzzFrameDecoder", "all-frames", stream)
write("FuzzFrameDecoder", "cut-mid-frame", stream[: len(stream) // 2])
write("FuzzFrameDecoder", "http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")

# Messages: type byte, flags byte, payload (as the frame carries it).
for name, frame in frames.items():
    write("FuzzMessages", name, frame[1:3] + frame[8:])

# Inflate: compressed DeltaBatch payloads.
for name, frame in frames.items():
    payload = frame[8:]
    if frame[2] & 1:
        write("FuzzInflate", name, payload)
    elif frame[1] == 0x07:
        write("FuzzInflate", name + "-deflated", zlib.compress(payload))
write("FuzzInflate", "zeros-bomb", zlib.compress(bytes(1 << 20), 9))

# Coverage: DeltaBatch protobuf payloads (inflated).
for name, frame in frames.items():
    if frame[1] == 0x07:
        payload = frame[8:]
        write("FuzzCoverage", name, zlib.decompress(payload) if frame[2] & 1 else payload)

# Batch reader: a version byte (even 2, odd 3), then a DeltaBatch payload (inflated).
for name, frame in frames.items():
    if frame[1] == 0x07:
        payload = frame[8:]
        payload = zlib.decompress(payload) if frame[2] & 1 else payload
        write("FuzzBatchReader", name + "-v2", b"\x00" + payload)
        write("FuzzBatchReader", name + "-v3", b"\x01" + payload)

json_seeds = {
    "object": b'{"_id":"a","n":1,"d":2.5,"s":"x\\u00e9\\n","t":true,"f":false,"z":null,"a":[1,[2,{}]],"o":{"b":1,"a":2}}',
    "numbers": b"[0,-0,1e308,-1e-308,123456789012345678901234567890,0.1,1E+2,-12]",
    "escapes": b'"\\ud83d\\ude00 \\u0000 \\t \\"\\\\/"',
    "deep": b"[" * 120 + b"]" * 120,
    "duplicate-keys": b'{"a":1,"a":2}',
    "whitespace": b' \t\n{ "k" : [ 1 , 2 ] }\r\n',
}
for name, data in json_seeds.items():
    write("FuzzJSON", name, data)

dql_seeds = {
    "insert": "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue', 'doors': 4}), (:doc) ON ID CONFLICT DO UPDATE",
    "initial": "INSERT INTO cars INITIAL DOCUMENTS ({'_id': 'template', 'color': 'white'})",
    "select": "SELECT color AS c, doors * 2, COUNT(*) FROM cars WHERE doors > 2 AND color IN ('blue', :c) "
    "AND owner.name LIKE 'Al%' AND tags[-1] IS NOT MISSING ORDER BY doors DESC, _id LIMIT 10 OFFSET 1",
    "update": "UPDATE COLLECTION cars (m MAP, photo ATTACHMENT) APPLY km INCREMENT BY 12, trips RESTART WITH 0 "
    "SET color = 'red', owner['first name'] = :name UNSET trim WHERE NOT (doors = 2 OR x IS NULL) LIMIT 3",
    "delete-evict": "DELETE FROM cars WHERE _id = 'a'; EVICT FROM cars WHERE deserialize_json(s).k % 2 = 1",
    "system": "ALTER SYSTEM SET transaction_trace_interval_ms = 250; SHOW ALL; SHOW document_size_hard_limit_bytes",
    "nested": "SELECT * FROM c WHERE " + "(" * 60 + "1" + ")" * 60 + " = -(-(-1))",
    "quoted": "SELECT `select`, \"x\" FROM `from` WHERE a != 'it''s' -- comment\n",
}
for name, text in dql_seeds.items():
    write("FuzzDQL", name, text.encode())
print("wrote", sum(len(files) for _, _, files in os.walk(corpus)), "seeds under", corpus)
