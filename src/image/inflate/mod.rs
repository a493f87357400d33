//! A layer's compressed bytes into its tar stream. Where the blob is a range of a file, a gzip
//! member's deflate stream decodes in parts on many cores (gzip_chunks.rs, rapidgzip's
//! marker/window method), and so does a zstd stream of several frames (zstd_frames.rs); libzstd
//! decodes a frame on one thread only (its threads compress). Elsewhere, and for a zstd stream of
//! one frame, both decode on one core (flate2, libzstd).

mod gzip_chunks;
mod read_at;
mod zlib_raw;
mod zstd_frames;

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use read_at::{read_at_most, ByteStream, ReadAt};
use zstd_frames::FrameReader;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// Threads from which a gzip member decodes in parts. Below, the flattening and the writers
/// need the CPUs the parts would take: on 2 CPUs a first start of the torch image took 18.8 s
/// in parts against 17.7 s on one core (median of 3, interleaved), a 1.2 GB layer's pull 0.98×.
const GZIP_PARTS_FROM: usize = 4;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// How long a layer that failed to read waits for its download's end, whose failure (a blob
/// that fails its digest) would be the cause: not for a registry that holds the rest back.
const VERDICT_WITHIN: Duration = Duration::from_secs(10);

/// A layer blob as a range of a file, read by position (by many cores at once).
pub struct Span {
    pub file: File,
    pub start: u64,
    pub len: u64,
    /// The same bytes as a stream that checks them (a digest) when read to its end; `None` when
    /// they were checked before (a registry blob in the cache), or are as they arrive.
    pub check: Option<Box<dyn Read + Send>>,
    /// Where the file is still being written (a download): a byte is read once it is there, and
    /// the stream ends once the whole blob is there and checked.
    pub arrival: Option<Arc<dyn Arrival>>,
}

/// A blob still being written into its file, and checked once whole.
pub trait Arrival: Send + Sync {
    /// How many of the blob's bytes are in the file, once byte `at` is (all of them once the
    /// blob is whole). Fails as the writing failed, or once `stop` is set and [`Arrival::wake`]
    /// called.
    fn arrived(&self, at: u64, stop: &AtomicBool) -> io::Result<u64>;
    /// Once the blob is whole and checked, Ok, or the error the writing or the check failed
    /// with; `None` where that takes longer than `within`.
    fn whole(&self, within: Option<Duration>) -> Option<io::Result<()>>;
    /// Every wait looks at its `stop` again.
    fn wake(&self);
}

/// Detect gzip / zstd / plain tar by magic bytes: media types lie more often than magic numbers.
pub fn decompress<'a>(r: Box<dyn Read + Send + 'a>) -> io::Result<Box<dyn Read + Send + 'a>> {
    let mut br = BufReader::with_capacity(1 << 20, r);
    let head = br.fill_buf()?;
    if head.starts_with(&GZIP_MAGIC) {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(br)))
    } else if head.starts_with(&ZSTD_MAGIC) {
        Ok(Box::new(zstd::stream::read::Decoder::with_buffer(br)?))
    } else {
        Ok(Box::new(br))
    }
}

/// A span's decompressed stream, with the check of its bytes running beside it.
pub struct Inflating<'a> {
    pub reader: Box<dyn Read + Send + 'a>,
    check: Option<JoinHandle<io::Result<()>>>,
    /// The blob, where it is still arriving.
    arrival: Option<Arc<dyn Arrival>>,
}

impl Inflating<'_> {
    /// What reading the stream came to (`read`), unless the check of the bytes failed: then the
    /// bytes were not the blob's, and that is the error.
    pub fn finish<E>(self, read: Result<(), E>, wrap: impl Fn(io::Error) -> E) -> Result<(), E> {
        drop(self.reader);
        let checked = match self.check.map(|h| h.join()) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(_)) => Err(io::Error::other("the check of the blob's digest panicked")),
        };
        // Bytes decoded as they arrived count once the whole blob has been checked. After a
        // failed read, the download's own failure is the cause to tell, if it comes soon.
        let within = read.is_err().then_some(VERDICT_WITHIN);
        let arrived = match self.arrival.and_then(|a| a.whole(within)) {
            Some(verdict) => verdict,
            None => Ok(()),
        };
        checked.and(arrived).map_err(wrap).and(read)
    }
}

/// A blob's stream decompressed on one core; `on_read` hears of the compressed bytes read.
pub fn inflate_stream<'a>(
    blob: Box<dyn Read + Send + 'a>,
    on_read: &'a (dyn Fn(u64) + Sync),
) -> io::Result<Inflating<'a>> {
    let reader = decompress(Box::new(Counting {
        inner: blob,
        on_read,
    }))?;
    Ok(Inflating {
        reader,
        check: None,
        arrival: None,
    })
}

/// `span` decompressed: a gzip member in parts on up to `threads` cores, from
/// [`GZIP_PARTS_FROM`] (CRC-32 and size checked at its end, the output byte-equal to flate2's),
/// and a zstd stream of several frames (byte-equal to libzstd's one thread); anything else as
/// [`inflate_stream`] does.
pub fn inflate_span<'a>(
    span: Span,
    threads: usize,
    on_read: &'a (dyn Fn(u64) + Sync),
) -> io::Result<Inflating<'a>> {
    let check = span
        .check
        .map(|mut c| std::thread::spawn(move || io::copy(&mut c, &mut io::sink()).map(drop)));
    let (furthest, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let source = Positional {
        file: span.file,
        start: span.start,
        len: span.len,
        furthest: furthest.clone(),
        arrival: span.arrival.clone(),
        stop: stop.clone(),
    };
    let mut head = [0u8; 4];
    let n = read_at_most(&source, 0, &mut head)?;
    let arrival = span.arrival;
    let inner = match on_many_cores(source, &head[..n], threads)? {
        Ok(inner) => inner,
        Err(source) => {
            let mut one = inflate_stream(
                Box::new(ByteStream {
                    src: source,
                    pos: 0,
                }),
                on_read,
            )?;
            one.check = check;
            one.arrival = arrival;
            return Ok(one);
        }
    };
    let reader = Box::new(Progress {
        inner,
        furthest,
        told: 0,
        on_read,
        stop,
        arrival: arrival.clone(),
    });
    Ok(Inflating {
        reader,
        check,
        arrival,
    })
}

type Decoded = Box<dyn Read + Send>;

/// `source` decoded on up to `threads` cores where its format allows it, else `source` back.
fn on_many_cores(
    source: Positional,
    head: &[u8],
    threads: usize,
) -> io::Result<Result<Decoded, Positional>> {
    if threads < 2 {
        return Ok(Err(source));
    }
    if head.starts_with(&GZIP_MAGIC) {
        if threads < GZIP_PARTS_FROM {
            return Ok(Err(source));
        }
        let source = Arc::new(source);
        let sizes = gzip_chunks::Sizes::for_stream(source.len, threads);
        return match gzip_chunks::start(source.clone(), threads, sizes)? {
            Some(r) => Ok(Ok(Box::new(r))),
            None => Ok(Err(Arc::into_inner(source).expect("the one reference"))),
        };
    }
    if head != ZSTD_MAGIC {
        return Ok(Err(source));
    }
    let Some(units) = zstd_frames::units(&source, source.len, zstd_frames::UNIT) else {
        return Ok(Err(source));
    };
    // The walk read headers all through the span: progress is what the decoding reads.
    source.furthest.store(0, Ordering::Relaxed);
    Ok(Ok(Box::new(FrameReader::start(source, units, threads)?)))
}

/// Counts the (compressed) bytes read from a blob, for progress.
struct Counting<'a> {
    inner: Box<dyn Read + Send + 'a>,
    on_read: &'a (dyn Fn(u64) + Sync),
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        (self.on_read)(n as u64);
        Ok(n)
    }
}

/// A span of a file read by position; the furthest byte read is its progress.
struct Positional {
    file: File,
    start: u64,
    len: u64,
    furthest: Arc<AtomicU64>,
    /// Where the file is still being written: reads wait for their bytes, until `stop`.
    arrival: Option<Arc<dyn Arrival>>,
    stop: Arc<AtomicBool>,
}

impl ReadAt for Positional {
    fn len(&self) -> io::Result<u64> {
        Ok(self.len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut room = self.len.saturating_sub(offset);
        if let (Some(a), 1..) = (&self.arrival, room) {
            room = room.min(a.arrived(offset, &self.stop)? - offset);
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = FileExt::read_at(&self.file, &mut buf[..want], self.start + offset)?;
        self.furthest
            .fetch_max(offset + n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The decoded stream, telling `on_read` how far into the compressed bytes the decoding got.
struct Progress<'a, R> {
    inner: R,
    furthest: Arc<AtomicU64>,
    told: u64,
    on_read: &'a (dyn Fn(u64) + Sync),
    /// Set when it is dropped: a worker waiting for bytes still to arrive gives up at once.
    stop: Arc<AtomicBool>,
    arrival: Option<Arc<dyn Arrival>>,
}

impl<R> Drop for Progress<'_, R> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(a) = &self.arrival {
            a.wake();
        }
    }
}

impl<R: Read> Read for Progress<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let now = self.furthest.load(Ordering::Relaxed);
        if now > self.told {
            (self.on_read)(now - self.told);
            self.told = now;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};
    use std::sync::{Condvar, Mutex};

    const MIB: usize = 1 << 20;

    /// Deterministic noise (xorshift): incompressible, so deflate stores it or codes literals.
    pub(super) fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut rng = Rng(seed);
        (0..n).map(|_| rng.next() as u8).collect()
    }

    /// xorshift64: the tests' seeded randomness.
    pub(super) struct Rng(pub(super) u64);

    impl Rng {
        pub(super) fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        pub(super) fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Words among random nibbles: about 2 to 1, literals and back-references both.
    pub(super) fn text(n: usize, seed: u64) -> Vec<u8> {
        let w = words(n, seed);
        let r = noise(n, seed + 1);
        w.chunks(48)
            .zip(r.chunks(16))
            .flat_map(|(w, r)| w.iter().copied().chain(r.iter().map(|&b| b'a' + (b & 15))))
            .take(n)
            .collect()
    }

    /// Words from a small vocabulary: compresses about 9 to 1, with long back-references.
    pub(super) fn words(n: usize, seed: u64) -> Vec<u8> {
        const VOCAB: [&str; 12] = [
            "layer ",
            "squashfs ",
            "inflate ",
            "window ",
            "marker ",
            "/usr/lib/",
            "libc.so.6\n",
            "python3 ",
            "torch ",
            "0123 ",
            "cuda ",
            "gpurun\n",
        ];
        let mut out = Vec::with_capacity(n + 16);
        for r in noise(n / 4, seed) {
            out.extend_from_slice(VOCAB[r as usize % VOCAB.len()].as_bytes());
            if out.len() >= n {
                break;
            }
        }
        out.truncate(n);
        out
    }

    pub(super) fn flate2_gz(data: &[u8], level: u32) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// The system's `gzip -LEVEL`, as layers made by docker and skopeo's peers are.
    pub(super) fn system_gz(data: &[u8], level: u32) -> Vec<u8> {
        let mut child = Command::new("gzip")
            .arg(format!("-{level}"))
            .arg("-c")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("gzip");
        let mut stdin = child.stdin.take().unwrap();
        let input = data.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(out.status.success());
        out.stdout
    }

    pub(super) fn sequential(blob: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(blob).read_to_end(&mut out)?;
        Ok(out)
    }

    /// One parallel inflate at a time: the zstd workers a test counts are its own.
    pub(super) static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Parts small enough that every test stream has many.
    pub(super) const TEST_SIZES: gzip_chunks::Sizes = gzip_chunks::Sizes {
        part: 64 << 10,
        max_out: 4 << 20,
    };

    /// `blob` in the middle of a file, inflated on `threads` cores; and the parts the workers
    /// decoded and reading did (none where the stream goes to one core).
    fn parallel(blob: &[u8], threads: usize) -> (io::Result<Vec<u8>>, (u64, u64)) {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"before the blob").unwrap();
        f.write_all(blob).unwrap();
        f.write_all(b"after it").unwrap();
        let source = Arc::new(Positional {
            file: f,
            start: 15,
            len: blob.len() as u64,
            furthest: Arc::default(),
            arrival: None,
            stop: Arc::default(),
        });
        let mut out = Vec::new();
        match gzip_chunks::start(source, threads, TEST_SIZES) {
            Ok(Some(mut r)) => {
                let read = r.read_to_end(&mut out).map(|_| out);
                (read, (r.taken, r.by_hand_count))
            }
            Ok(None) => (sequential(blob), (0, 0)),
            Err(e) => (Err(e), (0, 0)),
        }
    }

    /// Text, noise and runs by turns, `gzip -6`: 31 MB, long enough for the marker/window path.
    fn mixed() -> &'static [u8] {
        static MIXED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        MIXED.get_or_init(|| {
            let mut data = Vec::new();
            for i in 0..16 {
                data.extend_from_slice(&text(3 * MIB, 10 + i));
                data.extend_from_slice(&noise(MIB, 20 + i));
                data.extend_from_slice(&vec![i as u8; MIB]);
            }
            system_gz(&data, 6)
        })
    }

    #[test]
    fn byte_equal_to_one_core_on_every_kind_of_stream() {
        let prose = text(16 * MIB, 1);
        let rand = noise(8 * MIB, 2);
        let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
        for level in [1, 6, 9] {
            cases.push((format!("text flate2 -{level}"), flate2_gz(&prose, level)));
        }
        for level in [1, 6, 9] {
            cases.push((format!("text gzip -{level}"), system_gz(&prose, level)));
        }
        cases.push(("stored flate2 -0".into(), flate2_gz(&rand, 0)));
        cases.push(("noise flate2 -6".into(), flate2_gz(&rand, 6)));
        cases.push(("noise gzip -1".into(), system_gz(&rand, 1)));
        cases.push(("mixed blocks gzip -6".into(), mixed().to_vec()));
        cases.push(("zeros".into(), flate2_gz(&vec![0; 64 * MIB], 6)));
        // Runs a part decodes to more than it may hold (reading streams them), among text.
        let mut runs = text(2 * MIB, 3);
        runs.extend(std::iter::repeat_n(7u8, 48 * MIB));
        runs.extend_from_slice(&text(2 * MIB, 4));
        cases.push(("runs gzip -6".into(), system_gz(&runs, 6)));
        cases.push(("empty".into(), flate2_gz(b"", 6)));
        let members = [flate2_gz(&prose[..8 * MIB], 1), system_gz(&rand, 6)];
        cases.push(("multi-member".into(), members.concat()));
        for (name, blob) in &cases {
            let want = sequential(blob).unwrap();
            let (got, (taken, by_hand)) = parallel(blob, 2);
            let got = got.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(got == want, "{name}: differs");
            eprintln!("{name}: {taken} parts from the workers, {by_hand} by hand");
            // Blocks far smaller than a part, dynamic or stored: the workers place nearly every
            // part (zlib-rs's level 1 writes blocks of megabytes).
            let small_blocks = ["text", "stored", "noise", "mixed"];
            if small_blocks.iter().any(|k| name.starts_with(k)) && !name.ends_with("flate2 -1") {
                assert!(
                    taken > 8 && by_hand * 10 <= taken,
                    "{name}: {taken} taken, {by_hand} by hand"
                );
            }
        }
    }

    /// Reading a gzip span on many cores uses at most that many workers, and a reader dropped
    /// midway ends them all.
    #[test]
    fn gzip_workers_are_bounded_and_end_with_the_reader() {
        let blob = system_gz(&text(24 * MIB, 6), 6);
        let _turn = crate::lock(&ONE_AT_A_TIME);
        let src = Arc::new(blob);
        let mut r = gzip_chunks::start(src, 3, TEST_SIZES).unwrap().unwrap();
        assert!(workers_become("gzip-chunks", |n| n == 3), "not 3 workers");
        r.read_exact(&mut [0u8; MIB]).unwrap();
        drop(r);
        assert!(
            workers_become("gzip-chunks", |n| n == 0),
            "threads outlive the reader"
        );
    }

    /// `GPURUN_INFLATE_SEED`, else one from the clock; printed, so that a failure can be replayed.
    pub(super) fn seed() -> u64 {
        let seed = std::env::var("GPURUN_INFLATE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                t.map_or(1, |d| d.as_nanos() as u64 | 1)
            });
        eprintln!("GPURUN_INFLATE_SEED={seed}");
        seed
    }

    /// A seeded corpus of random streams: text, noise and runs in random order and sizes, at
    /// every gzip level; the seed is printed so that a failure can be replayed.
    #[test]
    fn random_streams_are_byte_equal_to_one_core() {
        let seed = seed();
        let mut r = noise(4096, seed).into_iter().map(u64::from);
        let mut next = move |n: u64| r.next().unwrap_or(7) * 2654435761 % n;
        for case in 0..10 {
            let mut data = Vec::new();
            for part in 0..1 + next(5) {
                let len = (next(3 * 1024) * 1024) as usize;
                let s = seed + case * 8 + part;
                match next(3) {
                    0 => data.extend_from_slice(&text(len, s)),
                    1 => data.extend_from_slice(&noise(len, s)),
                    _ => data.extend(std::iter::repeat_n(next(256) as u8, len)),
                }
            }
            let level = next(10) as u32;
            let blob = flate2_gz(&data, level);
            let (got, _) = parallel(&blob, 2);
            let got = got.unwrap_or_else(|e| panic!("case {case} (level {level}): {e}"));
            assert!(
                got == data,
                "case {case} (level {level}, {} bytes) differs",
                data.len()
            );
        }
    }

    #[test]
    fn cut_and_corrupt_streams_fail_as_on_one_core() {
        let blob = mixed();
        let n = blob.len();
        let flip = |at: usize, len: usize| {
            let mut b = blob.to_vec();
            b[at..at + len].iter_mut().for_each(|x| *x ^= 0x5a);
            b
        };
        let mut trailing = blob.to_vec();
        trailing.extend_from_slice(b"garbage after the member");
        let cases = [
            ("cut in the middle", blob[..n / 2].to_vec()),
            ("cut late", blob[..n - 4 * MIB / 3].to_vec()),
            ("cut before the size", blob[..n - 4].to_vec()),
            ("cut in the header", blob[..5].to_vec()),
            ("corrupt early", flip(n / 8, 64)),
            ("corrupt in the middle", flip(n / 2, 64)),
            ("corrupt CRC", flip(n - 8, 1)),
            ("corrupt size", flip(n - 2, 1)),
            ("trailing garbage", trailing),
        ];
        for (name, bad) in cases {
            let one = sequential(&bad).map(drop);
            let (many, _) = parallel(&bad, 2);
            assert!(one.is_err(), "{name}: flate2 took it");
            assert!(many.is_err(), "{name}: the parallel inflate took it");
            // What the flattener tells apart: a stream that ends early, or one that is wrong.
            let cut =
                |r: &io::Result<()>| r.as_ref().unwrap_err().kind() == io::ErrorKind::UnexpectedEof;
            assert_eq!(cut(&one), cut(&many.map(drop)), "{name}");
        }
    }

    #[test]
    fn a_span_is_read_whole_and_checked() {
        let data = text(8 * MIB, 4);
        let blob = system_gz(&data, 6);
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&blob).unwrap();
        let _turn = crate::lock(&ONE_AT_A_TIME);
        // One core below GZIP_PARTS_FROM threads, parts from there.
        for (threads, workers) in [(GZIP_PARTS_FROM - 1, 0), (GZIP_PARTS_FROM, GZIP_PARTS_FROM)] {
            let read = std::sync::atomic::AtomicU64::new(0);
            let on_read = |n| {
                read.fetch_add(n, Ordering::Relaxed);
            };
            let span = span_of(&f, 0, blob.len(), None);
            let mut s = inflate_span(span, threads, &on_read).unwrap();
            assert!(workers_become("gzip-chunks", |n| n == workers));
            let mut out = Vec::new();
            let r = s.reader.read_to_end(&mut out).map(drop);
            s.finish(r, |e| e).unwrap();
            assert!(out == data);
            assert_eq!(read.load(Ordering::Relaxed), blob.len() as u64);
            let check = Some(Box::new(FailingCheck) as Box<dyn Read + Send>);
            assert_check_fails(span_of(&f, 0, blob.len(), check), threads);
        }
    }

    /// `len` bytes of `f` from `start`, checked by `check`.
    fn span_of(f: &File, start: u64, len: usize, check: Option<Box<dyn Read + Send>>) -> Span {
        Span {
            file: f.try_clone().unwrap(),
            start,
            len: len as u64,
            check,
            arrival: None,
        }
    }

    /// A failed check of `span` is its error, even when its bytes decode.
    fn assert_check_fails(span: Span, threads: usize) {
        let mut s = inflate_span(span, threads, &|_| {}).unwrap();
        let r = s.reader.read_to_end(&mut Vec::new()).map(drop);
        let e = s.finish(r, |e| e).unwrap_err();
        assert_eq!(e.to_string(), "does not match its digest");
    }

    /// A zstd span of several frames decodes them on worker threads, reads to its end (progress
    /// counts every byte) and ends its workers when done.
    #[test]
    fn a_zstd_span_decodes_its_frames_on_many_cores() {
        let data = noise(10 * MIB, 5);
        let mut blob: Vec<u8> = data
            .chunks(MIB)
            .flat_map(|c| zstd::bulk::compress(c, 3).unwrap())
            .collect();
        blob.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, b'o', b'k']);
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"before the blob").unwrap();
        f.write_all(&blob).unwrap();
        f.write_all(b"after it").unwrap();
        let read = std::sync::atomic::AtomicU64::new(0);
        let on_read = |n| {
            read.fetch_add(n, Ordering::Relaxed);
        };
        let _turn = crate::lock(&ONE_AT_A_TIME);
        let mut s = inflate_span(span_of(&f, 15, blob.len(), None), 2, &on_read).unwrap();
        assert!(
            workers_become("zstd-frames", |n| n > 0),
            "no thread decodes the frames"
        );
        let mut out = Vec::new();
        let r = s.reader.read_to_end(&mut out).map(drop);
        s.finish(r, |e| e).unwrap();
        assert!(out == data);
        assert_eq!(read.load(Ordering::Relaxed), blob.len() as u64);
        assert!(
            workers_become("zstd-frames", |n| n == 0),
            "threads outlive the reader"
        );
        assert_check_fails(span_of(&f, 15, blob.len(), Some(Box::new(FailingCheck))), 2);
    }

    /// A blob written into a file a piece at a time by a thread of its own, as a download writes
    /// it: a read past what is written finds nothing there.
    struct Trickle {
        /// Bytes written, and how the writing ended.
        state: Mutex<(u64, Option<Result<(), String>>)>,
        more: Condvar,
        len: u64,
    }

    impl Trickle {
        /// What `ready` says of the state, once it says.
        fn until<T>(&self, ready: impl Fn(&(u64, Option<Result<(), String>>)) -> Option<T>) -> T {
            let mut st = crate::lock(&self.state);
            loop {
                match ready(&st) {
                    Some(r) => return r,
                    None => st = self.more.wait(st).unwrap(),
                }
            }
        }
    }

    impl Arrival for Trickle {
        fn arrived(&self, at: u64, stop: &AtomicBool) -> io::Result<u64> {
            self.until(|(have, ended)| match ended {
                Some(Ok(())) => Some(Ok(self.len)),
                Some(Err(e)) => Some(Err(io::Error::other(e.clone()))),
                None if stop.load(Ordering::Relaxed) => Some(Err(io::Error::other("stop"))),
                None => (*have > at).then_some(Ok(*have)),
            })
        }

        fn whole(&self, _: Option<Duration>) -> Option<io::Result<()>> {
            Some(
                self.until(|(_, ended)| ended.clone())
                    .map_err(io::Error::other),
            )
        }

        fn wake(&self) {
            let _st = crate::lock(&self.state);
            self.more.notify_all();
        }
    }

    /// A span of `blob` as it is written, 64 KiB at a time; after `upto` bytes the writing ends
    /// as `end` says (`None`: it stalls there for good).
    fn trickle(blob: &[u8], upto: usize, end: Option<Result<(), String>>) -> Span {
        let file = tempfile::tempfile().unwrap();
        let t = Arc::new(Trickle {
            state: Mutex::default(),
            more: Condvar::new(),
            len: blob.len() as u64,
        });
        let (mut w, writing, blob) = (file.try_clone().unwrap(), t.clone(), blob[..upto].to_vec());
        std::thread::spawn(move || {
            for piece in blob.chunks(64 << 10) {
                w.write_all(piece).unwrap();
                crate::lock(&writing.state).0 += piece.len() as u64;
                writing.more.notify_all();
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            if let Some(end) = end {
                crate::lock(&writing.state).1 = Some(end);
                writing.more.notify_all();
            }
        });
        Span {
            file,
            start: 0,
            len: t.len,
            check: None,
            arrival: Some(t),
        }
    }

    /// `span` read to its end and finished: its output, or the error it ends with.
    fn read_whole(span: Span, threads: usize) -> io::Result<Vec<u8>> {
        let mut s = inflate_span(span, threads, &|_| {})?;
        let mut out = Vec::new();
        let r = s.reader.read_to_end(&mut out).map(drop);
        s.finish(r, |e| e).map(|()| out)
    }

    // Guards the reading of a blob while it downloads: bytes read only once written (else the
    // output differs or is cut), and the stream's end only once the download ended well (its
    // digest checked), whatever decodes it.
    #[test]
    fn a_span_is_read_as_it_arrives_and_ends_as_its_writing_does() {
        let data = text(8 * MIB, 7);
        let gz = system_gz(&data, 6);
        let zst: Vec<u8> = data
            .chunks(MIB)
            .flat_map(|c| zstd::bulk::compress(c, 3).unwrap())
            .collect();
        let _turn = crate::lock(&ONE_AT_A_TIME);
        let decoders = [
            ("gzip on one core", &gz, 1),
            ("gzip in parts", &gz, GZIP_PARTS_FROM),
        ];
        for (name, blob, threads) in decoders.into_iter().chain([("zstd frames", &zst, 2)]) {
            let whole = read_whole(trickle(blob, blob.len(), Some(Ok(()))), threads);
            assert!(
                whole.unwrap_or_else(|e| panic!("{name}: {e}")) == data,
                "{name}"
            );
            let bad = Some(Err("does not match its digest".to_string()));
            let e = read_whole(trickle(blob, blob.len(), bad), threads).unwrap_err();
            assert_eq!(e.to_string(), "does not match its digest", "{name}");
            let lost = Some(Err("connection lost".to_string()));
            let e = read_whole(trickle(blob, blob.len() / 2, lost), threads).unwrap_err();
            assert_eq!(e.to_string(), "connection lost", "{name}");
        }
    }

    // Guards the end of workers that wait for bytes of a download that stalls: a reader dropped
    // then returns at once, its workers joined.
    #[test]
    fn a_reader_dropped_while_its_blob_stalls_returns_at_once() {
        let blob = system_gz(&text(8 * MIB, 8), 6);
        let _turn = crate::lock(&ONE_AT_A_TIME);
        let span = trickle(&blob, blob.len() / 3, None);
        let mut s = inflate_span(span, GZIP_PARTS_FROM, &|_| {}).unwrap();
        s.reader.read_exact(&mut [0; 1000]).unwrap();
        let t = std::time::Instant::now();
        drop(s);
        assert!(t.elapsed() < std::time::Duration::from_millis(500));
        assert!(workers_become("gzip-chunks", |n| n == 0));
    }

    /// Whether the number of this process's threads called `name` comes to satisfy `want` within
    /// seconds (a thread names itself once started, and leaves /proc a moment after it is joined).
    fn workers_become(name: &str, want: impl Fn(usize) -> bool) -> bool {
        let wanted = format!("{name}\n");
        let count = || {
            let tasks = std::fs::read_dir("/proc/self/task").unwrap();
            let comm = |t: std::fs::DirEntry| std::fs::read(t.path().join("comm")).ok();
            let names = tasks.filter_map(|t| comm(t.ok()?));
            names.filter(|n| n == wanted.as_bytes()).count()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !want(count()) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        true
    }

    struct FailingCheck;

    impl Read for FailingCheck {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "does not match its digest",
            ))
        }
    }
}
