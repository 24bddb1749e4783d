//! Criterion benches of the backup and restore hot loops: splitting, hashing, compressing,
//! sealing, the base64-runs codec, packing and index lookups. `cargo bench -p mailvault-core`.
#![allow(clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mailvault_core::repo::compress::{self, Codec, Compression, Dictionaries};
use mailvault_core::repo::crypto::MasterKey;
use mailvault_core::repo::format::BlobKind;
use mailvault_core::repo::format::{Object, Version};
use mailvault_core::repo::id::Id;
use mailvault_core::repo::index::Index;
use mailvault_core::repo::pack::{PackBuilder, PackEntry};
use mailvault_core::repo::split::{split, Chunker, ChunkerParams};

/// A message-like text of `len` bytes: headers, then words.
fn message(len: usize, seed: u64) -> Vec<u8> {
    let words = [
        "the", "report", "meeting", "tomorrow", "budget", "please", "review", "attached",
        "regards", "team",
    ];
    let mut m = format!("Received: from mx{seed}.example.org by mail.example.org; Mon, 1 Jan 2024\nFrom: a{seed}@example.org\nSubject: note {seed}\n\n").into_bytes();
    let mut x = seed.wrapping_mul(6364136223846793005) | 1;
    while m.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        m.extend_from_slice(words[(x % 10) as usize].as_bytes());
        m.push(if x.is_multiple_of(13) { b'\n' } else { b' ' });
    }
    m.truncate(len);
    m
}

/// Format 2's keyed chunker against format 1's public table and fastcdc's own iterator:
/// the same cut code with another table, so the same speed is expected.
fn chunkers(c: &mut Criterion) {
    let key = MasterKey::random();
    let p = ChunkerParams::default();
    // Random-looking bytes (xorshift), as compressed attachments are: every table then
    // cuts about every `avg` bytes, so the three rows do the same work.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<u8> = (0..4u64 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    for (name, n) in [
        (
            "fastcdc crate",
            fastcdc::v2020::FastCDC::new(&data, p.min, p.avg, p.max).count(),
        ),
        (
            "keyed table",
            Chunker::keyed(p, key.gear_table()).chunks(&data).count(),
        ),
    ] {
        eprintln!("chunker_4MiB: {name} cuts {n} chunks");
    }
    let mut g = c.benchmark_group("chunker_4MiB");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("fastcdc_crate", |b| {
        b.iter(|| fastcdc::v2020::FastCDC::new(&data, p.min, p.avg, p.max).count())
    });
    let public = Chunker::public(p);
    g.bench_function("public_table", |b| b.iter(|| public.chunks(&data).count()));
    let keyed = Chunker::keyed(p, key.gear_table());
    g.bench_function("keyed_table", |b| b.iter(|| keyed.chunks(&data).count()));
    g.finish();
}

fn bench(c: &mut Criterion) {
    let key = MasterKey::random();
    let sizes = [4 << 10, 64 << 10, 1 << 20];
    let mut g = c.benchmark_group("per_blob");
    for &n in &sizes {
        let m = message(n, 7);
        g.throughput(Throughput::Bytes(n as u64));
        let chunker = Chunker::keyed(ChunkerParams::default(), key.gear_table());
        g.bench_with_input(BenchmarkId::new("split", n), &m, |b, m| {
            b.iter(|| split(m, &chunker))
        });
        g.bench_with_input(BenchmarkId::new("blob_id", n), &m, |b, m| {
            b.iter(|| key.blob_id(m))
        });
        g.bench_with_input(BenchmarkId::new("zstd", n), &m, |b, m| {
            b.iter(|| compress::compress(m, Compression::Zstd, None))
        });
        g.bench_with_input(BenchmarkId::new("lz4", n), &m, |b, m| {
            b.iter(|| compress::compress(m, Compression::Lz4, None))
        });
        g.bench_with_input(BenchmarkId::new("seal", n), &m, |b, m| {
            b.iter(|| key.seal(m))
        });
        let sealed = key.seal(&m);
        g.bench_with_input(BenchmarkId::new("open", n), &sealed, |b, s| {
            b.iter(|| key.open(s, "b").unwrap())
        });
        // Format 2: the associated data that binds a blob's kind and id.
        let id = key.blob_id(&m);
        let aad = Object::Blob(BlobKind::Data, &id).aad();
        let sealed = key.seal_ad(&m, &aad);
        g.bench_with_input(BenchmarkId::new("open_ad", n), &sealed, |b, s| {
            b.iter(|| key.open_vec_ad(s.clone(), &aad, "b").unwrap())
        });
        let (codec, packed) = compress::compress(&m, Compression::Zstd, None).unwrap();
        let dicts = Dictionaries::default();
        g.bench_with_input(BenchmarkId::new("unzstd", n), &packed, |b, p| {
            b.iter(|| compress::decompress(codec, p, n, "b", &dicts).unwrap())
        });
    }
    g.finish();

    // The base64-runs codec on an attachment chunk and on text it must pass over quickly
    // (compress = the codec's attempt, then zstd).
    let mut g = c.benchmark_group("b64");
    let n = 64 << 10;
    g.throughput(Throughput::Bytes(n as u64));
    let mut a = mailvault_core::repo::b64::test_attachment(n, 76, "\n", 1);
    a.truncate(n);
    g.bench_function("encode_attachment", |b| {
        b.iter(|| mailvault_core::repo::b64::encode(&a).unwrap())
    });
    let enc = mailvault_core::repo::b64::encode(&a).unwrap();
    g.bench_function("decode_attachment", |b| {
        b.iter(|| mailvault_core::repo::b64::decode(&enc, n).unwrap())
    });
    let text = message(n, 3);
    g.bench_function("encode_text", |b| {
        b.iter(|| mailvault_core::repo::b64::encode(&text))
    });
    g.bench_function("compress_text", |b| {
        b.iter(|| compress::compress(&text, Compression::Zstd, None))
    });
    g.finish();

    let samples: Vec<Vec<u8>> = (0..2000).map(|i| message(3000, i)).collect();
    let mut dicts = Dictionaries::default();
    let id = dicts.add(&compress::train(&samples).unwrap(), "d").unwrap();
    dicts.set_encoder(id);
    let m = message(4 << 10, 99_999);
    c.bench_function("zstd_dict_4k", |b| {
        b.iter(|| compress::compress(&m, Compression::Zstd, dicts.encoder()))
    });

    let sealed = key.seal(&m);
    c.bench_function("pack_16MiB_of_4k_blobs", |b| {
        b.iter(|| {
            let mut p = PackBuilder::default();
            for i in 0..4096u32 {
                let mut id = [0u8; 32];
                id[..4].copy_from_slice(&i.to_le_bytes());
                p.add(Id(id), BlobKind::Data, Codec::Zstd, m.len(), &sealed);
            }
            p.finish(&key, Version::V2)
        })
    });

    let mut index = Index::default();
    let entries: Vec<PackEntry> = (0..1_000_000u32)
        .map(|i| PackEntry {
            id: key.blob_id(&i.to_le_bytes()),
            kind: BlobKind::Data,
            codec: Codec::Zstd,
            offset: i,
            stored_len: 100,
            raw_len: 200,
        })
        .collect();
    for (n, chunk) in entries.chunks(4096).enumerate() {
        let mut pid = [0u8; 32];
        pid[..8].copy_from_slice(&(n as u64).to_le_bytes());
        index.add_pack(Id(pid), Version::V2, chunk);
    }
    let probe: Vec<Id> = entries.iter().step_by(997).map(|e| e.id).collect();
    c.bench_function("index_lookup_1M", |b| {
        b.iter(|| probe.iter().filter(|id| index.contains(id)).count())
    });
}

criterion_group!(benches, bench, chunkers);
criterion_main!(benches);
