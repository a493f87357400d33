//! A zstd stream of several frames decoded on many cores. libzstd decodes a frame on one thread,
//! but frames are independent: zstd:chunked layers (podman, buildah: a frame a file) and any
//! stream written as several frames are walked from their headers, without decoding, grouped
//! into units of a few MiB, and the units decoded at once by libzstd, read back in order.
//! Our own code: libzstd has no parallel decoding, and the crates checked (zeekstd, zstd-framed)
//! need a seek table or decode their frames in order.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, SendError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::read_at::{read_exact_at, ReadAt};

/// Frames are grouped into units of at least this many compressed bytes: zstd:chunked's frames
/// are often a few KiB, and a hand-over each would cost more than decoding them.
pub(super) const UNIT: u64 = 4 << 20;
/// A worker hands its output over in pieces of this size…
const PIECE: usize = 1 << 20;
/// …and at most this many wait per unit: the units after the one being read decode ahead by up to
/// 16 MiB each, and memory stays about 20 MiB a thread (spare pieces too), whatever the frames.
const WAITING: usize = 16;
/// The walk reads headers less than `NEAR` bytes apart (small frames, small blocks) in chunks of
/// `CHUNK` bytes, those further apart (big blocks) `FAR` bytes at a time: a system call a header
/// costs more than copying the bytes between close ones, less than copying those between far
/// ones. 0.8 GB of 16 MiB frames walk in about 30 ms, of 4 KiB frames 40, one frame 10.
const CHUNK: usize = 256 << 10;
const NEAR: u64 = 32 << 10;
const FAR: usize = 512;

/// libzstd decodes a frame in one pass where the caller's buffer holds its whole content (its
/// size in its header) and the frame is all in its input; else a block at a time. The one-pass
/// decoder takes frames the streaming one refuses: a window over its limit (`ZSTD_d_windowLogMax`,
/// 2^27 + 1 by default), raw and RLE blocks over the frame's block maximum. Which of the two a
/// frame meets depends on the room left in the reader's buffer, and a unit's worker leaves other
/// room than a one-core reader: so that both come to the same, a walk stops at such frames and
/// the one-thread decoder reads the stream as it always did.
const MAX_WINDOW: u64 = (1 << 27) + 1;
const BLOCK_MAX: u64 = 128 << 10;

const FRAME_MAGIC: u32 = 0xFD2F_B528;
/// Skippable frames' magic numbers are 0x184D2A50 to 0x184D2A5F.
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;

/// One frame: where it lies in the stream, and whether it holds data (a skippable frame, such as
/// zstd:chunked's table of contents, decodes to nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Frame {
    pub(super) at: Range<u64>,
    pub(super) data: bool,
}

/// Where a walk stops; the one-thread decoder then reads the stream as it always did (and fails,
/// but for the frames [`MAX_WINDOW`] tells of).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Malformed {
    /// Something other than a frame's magic number where a frame begins.
    Magic,
    /// A frame header's reserved bit set.
    ReservedBit,
    /// A block of the reserved type.
    ReservedBlock,
    /// The stream ends inside a frame.
    Cut,
    /// Reading the stream failed.
    Unreadable,
    /// A window larger than libzstd's streaming decoder takes ([`MAX_WINDOW`]).
    Window,
    /// A block larger than its frame's maximum (its window, at most 128 KiB).
    BlockSize,
}

/// The frames of the first `len` bytes of `src`, in order, found from their headers alone (RFC
/// 8878, 3.1): a block header gives its block's size, so a walk reads a few bytes a block.
pub(super) struct Frames<'a, S: ?Sized> {
    src: &'a S,
    len: u64,
    pos: u64,
    /// The bytes of `src` from `buf_at` on, read last.
    buf: Vec<u8>,
    buf_at: u64,
    /// Where the bytes asked for last began.
    last: u64,
    stopped: bool,
}

impl<'a, S: ReadAt + ?Sized> Frames<'a, S> {
    pub(super) fn new(src: &'a S, len: u64) -> Self {
        Frames {
            src,
            len,
            pos: 0,
            buf: Vec::new(),
            buf_at: 0,
            last: 0,
            stopped: false,
        }
    }

    /// The `n` bytes at `at`, from the chunk read last or from one read there.
    fn bytes(&mut self, at: u64, n: usize) -> Result<&[u8], Malformed> {
        let end = at + n as u64;
        if end > self.len {
            return Err(Malformed::Cut);
        }
        let chunk = if at.saturating_sub(self.last) > NEAR {
            FAR
        } else {
            CHUNK
        };
        self.last = at;
        if at < self.buf_at || end > self.buf_at + self.buf.len() as u64 {
            let want = usize::try_from(self.len - at).map_or(chunk, |left| left.min(chunk));
            self.buf.resize(want, 0);
            read_exact_at(self.src, at, &mut self.buf).map_err(|_| Malformed::Unreadable)?;
            self.buf_at = at;
        }
        let from = (at - self.buf_at) as usize;
        Ok(&self.buf[from..from + n])
    }

    /// The frame at `self.pos`.
    fn frame(&mut self) -> Result<Frame, Malformed> {
        let start = self.pos;
        let magic = le(self.bytes(start, 4)?) as u32;
        if magic & !0xF == SKIPPABLE_MAGIC {
            let size = le(self.bytes(start + 4, 4)?);
            return self.ending(start, start + 8 + size, false);
        }
        if magic != FRAME_MAGIC {
            return Err(Malformed::Magic);
        }
        let descriptor = self.bytes(start + 4, 1)?[0];
        if descriptor & 0x08 != 0 {
            return Err(Malformed::ReservedBit);
        }
        let window = self.window(start, descriptor)?;
        if window > MAX_WINDOW {
            return Err(Malformed::Window);
        }
        let block_max = window.min(BLOCK_MAX);
        let mut at = start + 5 + header_len(descriptor);
        loop {
            let header = le(self.bytes(at, 3)?);
            let size = header >> 3;
            if size > block_max {
                return Err(Malformed::BlockSize);
            }
            // Raw and compressed blocks hold `size` bytes, an RLE block the one byte it repeats.
            at += 3 + match (header >> 1) & 3 {
                0 | 2 => size,
                1 => 1,
                _ => return Err(Malformed::ReservedBlock),
            };
            if header & 1 == 1 {
                break;
            }
        }
        let checksum = if descriptor & 0x04 != 0 { 4 } else { 0 };
        self.ending(start, at + checksum, true)
    }

    /// The window size of the frame at `start` (RFC 8878, 3.1.1.1.2): its window descriptor's,
    /// or its content size where it is a single segment.
    fn window(&mut self, start: u64, descriptor: u8) -> Result<u64, Malformed> {
        let single_segment = descriptor & 0x20 != 0;
        if !single_segment {
            let w = self.bytes(start + 5, 1)?[0];
            let base = 1u64 << (10 + (w >> 3));
            return Ok(base + base / 8 * u64::from(w & 7));
        }
        let dictionary = [0, 1, 2, 4][usize::from(descriptor & 3)];
        Ok(match descriptor >> 6 {
            0 => le(self.bytes(start + 5 + dictionary, 1)?),
            1 => le(self.bytes(start + 5 + dictionary, 2)?) + 256,
            2 => le(self.bytes(start + 5 + dictionary, 4)?),
            _ => le(self.bytes(start + 5 + dictionary, 8)?),
        })
    }

    fn ending(&self, start: u64, end: u64, data: bool) -> Result<Frame, Malformed> {
        if end > self.len {
            return Err(Malformed::Cut);
        }
        Ok(Frame {
            at: start..end,
            data,
        })
    }
}

impl<S: ReadAt + ?Sized> Iterator for Frames<'_, S> {
    type Item = Result<Frame, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped || self.pos >= self.len {
            return None;
        }
        let frame = self.frame();
        match &frame {
            Ok(f) => self.pos = f.at.end,
            Err(_) => self.stopped = true,
        }
        Some(frame)
    }
}

/// A frame header's length after its descriptor: the window descriptor, the dictionary id and the
/// content size, as the descriptor's flags say (RFC 8878, 3.1.1.1.1).
fn header_len(descriptor: u8) -> u64 {
    let single_segment = descriptor & 0x20 != 0;
    let dictionary = [0, 1, 2, 4][usize::from(descriptor & 3)];
    let content_size = match descriptor >> 6 {
        0 => u64::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    u64::from(!single_segment) + dictionary + content_size
}

/// A little-endian number of up to 8 bytes.
fn le(b: &[u8]) -> u64 {
    b.iter().rev().fold(0, |n, &x| n << 8 | u64::from(x))
}

/// The first `len` bytes of `src` as units of whole frames of at least `min` bytes each (the last
/// may be shorter), in order; `None` where the walk stops, or where fewer than two units or two
/// data frames leave nothing to decode at once.
pub(super) fn units<S: ReadAt + ?Sized>(src: &S, len: u64, min: u64) -> Option<Vec<Range<u64>>> {
    let (mut units, mut open, mut data) = (Vec::new(), 0, 0);
    for frame in Frames::new(src, len) {
        let frame = frame.ok()?;
        data += usize::from(frame.data);
        if frame.at.end - open >= min {
            units.push(open..frame.at.end);
            open = frame.at.end;
        }
    }
    if open < len {
        units.push(open..len);
    }
    (units.len() >= 2 && data >= 2).then_some(units)
}

/// What a worker hands the reader of its unit.
enum Piece {
    Data(Vec<u8>),
    End,
    Failed(io::Error),
}

/// A unit for a worker, and where its pieces go.
type Job = (Range<u64>, SyncSender<Piece>);

/// What the reader and its workers share.
#[derive(Default)]
struct Common {
    /// Set when reading stops: a worker's next read of the stream fails, and so it ends.
    cancel: AtomicBool,
    /// Pieces read, for the workers to fill again: a new one is zeroed and faulted in afresh.
    spare: Mutex<Vec<Vec<u8>>>,
}

/// A stream's units decoded on worker threads and read back in order: the one-thread decoder's
/// output byte for byte, then its error where a unit fails.
pub(super) struct FrameReader {
    /// Units not handed out yet: at most one unit a worker is handed out and not yet read.
    waiting: std::vec::IntoIter<Range<u64>>,
    /// Where the workers take units from; `None` once reading stops, which ends the workers.
    jobs: Option<Sender<Job>>,
    /// The units handed out, in order; the first is being read.
    handed: VecDeque<Receiver<Piece>>,
    piece: Vec<u8>,
    at: usize,
    /// The error a unit failed with, returned again by any later read.
    failed: Option<(io::ErrorKind, String)>,
    common: Arc<Common>,
    workers: Vec<JoinHandle<()>>,
}

impl FrameReader {
    /// `units` of `src` decoded on up to `threads` workers.
    pub(super) fn start<S: ReadAt + 'static>(
        src: S,
        units: Vec<Range<u64>>,
        threads: usize,
    ) -> io::Result<FrameReader> {
        let (jobs, taken) = channel::<Job>();
        let (src, taken) = (Arc::new(src), Arc::new(Mutex::new(taken)));
        let n = threads.clamp(1, units.len().max(1));
        let mut r = FrameReader {
            waiting: units.into_iter(),
            jobs: Some(jobs),
            handed: VecDeque::new(),
            piece: Vec::new(),
            at: 0,
            failed: None,
            common: Arc::default(),
            workers: Vec::new(),
        };
        for _ in 0..n {
            let (src, taken, common) = (src.clone(), taken.clone(), r.common.clone());
            let spawned = std::thread::Builder::new()
                .name("zstd-frames".into())
                .spawn(move || work(&*src, &taken, &common));
            match spawned {
                Ok(w) => r.workers.push(w),
                // Fewer workers decode the same units, only slower (a limit on threads reached).
                Err(_) if !r.workers.is_empty() => break,
                Err(e) => return Err(e),
            }
        }
        for _ in 0..r.workers.len() {
            r.hand_out();
        }
        Ok(r)
    }

    /// The next unit to the workers, if one is left.
    fn hand_out(&mut self) {
        let (Some(jobs), Some(unit)) = (&self.jobs, self.waiting.next()) else {
            return;
        };
        let (tx, rx) = sync_channel(WAITING);
        // Fails only once every worker has gone: its unit then reads as a thread ended early.
        let _ = jobs.send((unit, tx));
        self.handed.push_back(rx);
    }

    /// Reading stops at `e`: later reads return it again, and the workers end.
    fn fail(&mut self, e: io::Error) -> io::Error {
        self.failed = Some((e.kind(), e.to_string()));
        self.stop();
        e
    }

    /// A piece read back to the workers, up to two a worker.
    fn recycle(&self, piece: Vec<u8>) {
        let mut spare = crate::lock(&self.common.spare);
        if spare.len() < 2 * self.workers.len() {
            spare.push(piece);
        }
    }

    fn stop(&mut self) {
        self.common.cancel.store(true, Ordering::Relaxed);
        self.jobs = None;
        self.handed.clear();
    }
}

impl Read for FrameReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.piece.len() {
            if let Some((kind, why)) = &self.failed {
                return Err(io::Error::new(*kind, why.clone()));
            }
            let Some(unit) = self.handed.front() else {
                return Ok(0);
            };
            match unit.recv() {
                Ok(Piece::Data(p)) => {
                    let read = std::mem::replace(&mut self.piece, p);
                    self.recycle(read);
                    self.at = 0;
                }
                Ok(Piece::End) => {
                    self.handed.pop_front();
                    self.hand_out();
                }
                Ok(Piece::Failed(e)) => return Err(self.fail(e)),
                Err(_) => {
                    let e = io::Error::other("a thread decoding zstd frames ended early");
                    return Err(self.fail(e));
                }
            }
        }
        let n = buf.len().min(self.piece.len() - self.at);
        buf[..n].copy_from_slice(&self.piece[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Drop for FrameReader {
    /// The workers end: those waiting for a unit or handing a piece over at once, one decoding at
    /// its next read of the stream.
    fn drop(&mut self) {
        self.stop();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A worker: units from `taken` until reading stops.
fn work<S: ReadAt + ?Sized>(src: &S, taken: &Mutex<Receiver<Job>>, common: &Common) {
    loop {
        // The lock is held only while waiting for a unit, not while decoding it.
        let job = crate::lock(taken).recv();
        let Ok((unit, tx)) = job else {
            return;
        };
        if decode(src, unit, &tx, common).is_err() {
            return;
        }
    }
}

/// `unit` of `src` decoded into `tx` a piece at a time, as the one-thread decoder decodes it: its
/// output up to an error, then the error. `Err` when reading has stopped.
fn decode<S: ReadAt + ?Sized>(
    src: &S,
    unit: Range<u64>,
    tx: &SyncSender<Piece>,
    common: &Common,
) -> Result<(), SendError<Piece>> {
    let part = Part {
        src,
        pos: unit.start,
        end: unit.end,
        cancel: &common.cancel,
    };
    let mut decoder = match zstd::stream::read::Decoder::new(part) {
        Ok(d) => d,
        Err(e) => return tx.send(Piece::Failed(e)),
    };
    loop {
        let mut piece = crate::lock(&common.spare).pop().unwrap_or_default();
        piece.resize(PIECE, 0);
        let (n, read) = fill(&mut decoder, &mut piece);
        piece.truncate(n);
        match read {
            Ok(()) if n == 0 => return tx.send(Piece::End),
            Ok(()) => tx.send(Piece::Data(piece))?,
            Err(e) => {
                if n > 0 {
                    tx.send(Piece::Data(piece))?;
                }
                return tx.send(Piece::Failed(e));
            }
        }
    }
}

/// `buf` filled from `r` as far as it goes: how far, and the error that stopped it.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> (usize, io::Result<()>) {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (n, Err(e)),
        }
    }
    (n, Ok(()))
}

/// A unit's bytes of the stream, read by position; a read fails once reading has stopped, so
/// that a worker inside a long frame ends too.
struct Part<'a, S: ?Sized> {
    src: &'a S,
    pos: u64,
    end: u64,
    cancel: &'a AtomicBool,
}

impl<S: ReadAt + ?Sized> Read for Part<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(io::Error::other("zstd decoding stopped"));
        }
        let room = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX);
        let want = buf.len().min(room);
        let n = self.src.read_at(self.pos, &mut buf[..want])?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::inflate::decompress;
    use crate::image::inflate::tests::{noise, seed, text, words, ONE_AT_A_TIME};
    use std::time::{Duration, Instant};
    use zstd::zstd_safe::CParameter;

    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;

    /// `data` as one frame written by libzstd at `level`, with a content checksum and the
    /// content size where asked.
    fn frame(data: &[u8], level: i32, checksum: bool, size: bool) -> Vec<u8> {
        let mut c = zstd::bulk::Compressor::new(level).unwrap();
        c.set_parameter(CParameter::ChecksumFlag(checksum)).unwrap();
        c.set_parameter(CParameter::ContentSizeFlag(size)).unwrap();
        c.compress(data).unwrap()
    }

    /// `data` as frames of `each` bytes, with checksums and sizes, as the zstd CLI writes them.
    fn frames(data: &[u8], each: usize, level: i32) -> Vec<u8> {
        data.chunks(each)
            .flat_map(|c| frame(c, level, true, true))
            .collect()
    }

    fn skippable(magic: u32, data: &[u8]) -> Vec<u8> {
        let mut f = magic.to_le_bytes().to_vec();
        f.extend_from_slice(&(data.len() as u32).to_le_bytes());
        f.extend_from_slice(data);
        f
    }

    enum Block<'a> {
        Raw(&'a [u8]),
        Rle(u8, usize),
        Reserved,
    }

    /// A frame made by hand, for header shapes libzstd does not write: the content-size flag
    /// `fcs`, the single-segment flag, a dictionary id of `did` flag (its value 0: none), and
    /// `blocks`; with the content it decodes to.
    fn by_hand(fcs: u8, single: bool, did: u8, blocks: &[Block]) -> (Vec<u8>, Vec<u8>) {
        let (mut content, mut body) = (Vec::new(), Vec::new());
        for (i, b) in blocks.iter().enumerate() {
            let (kind, size, payload): (u32, usize, &[u8]) = match b {
                Block::Raw(d) => (0, d.len(), d),
                Block::Rle(x, n) => (1, *n, std::slice::from_ref(x)),
                Block::Reserved => (3, 0, b""),
            };
            match b {
                Block::Raw(d) => content.extend_from_slice(d),
                Block::Rle(x, n) => content.extend(std::iter::repeat_n(*x, *n)),
                Block::Reserved => {}
            }
            let last = u32::from(i + 1 == blocks.len());
            body.extend_from_slice(&(last | kind << 1 | (size as u32) << 3).to_le_bytes()[..3]);
            body.extend_from_slice(payload);
        }
        let mut f = FRAME_MAGIC.to_le_bytes().to_vec();
        f.push(fcs << 6 | u8::from(single) << 5 | did);
        if !single {
            f.push(10 << 3); // a window of 1 MiB
        }
        f.extend(std::iter::repeat_n(0, [0, 1, 2, 4][usize::from(did)]));
        let n = content.len() as u64;
        match (fcs, single) {
            (0, false) => {}
            (0, true) => f.push(n as u8),
            (1, _) => f.extend_from_slice(&((n - 256) as u16).to_le_bytes()),
            (2, _) => f.extend_from_slice(&(n as u32).to_le_bytes()),
            _ => f.extend_from_slice(&n.to_le_bytes()),
        }
        f.extend(body);
        (f, content)
    }

    /// Today's decoder, on one core: its output up to its error, and the error.
    fn sequential(blob: &[u8]) -> (Vec<u8>, io::Result<()>) {
        let mut out = Vec::new();
        let read = decompress(Box::new(blob)).and_then(|mut d| d.read_to_end(&mut out));
        (out, read.map(drop))
    }

    /// `blob` decoded as a span is, with units of `min` bytes: on `threads` workers where the walk
    /// finds two units or more (`None` where it does not).
    fn parallel(blob: &[u8], threads: usize, min: u64) -> Option<(Vec<u8>, io::Result<()>)> {
        let units = units(blob, blob.len() as u64, min)?;
        let _turn = crate::lock(&ONE_AT_A_TIME);
        let mut out = Vec::new();
        let read = FrameReader::start(blob.to_vec(), units, threads)
            .and_then(|mut r| r.read_to_end(&mut out));
        Some((out, read.map(drop)))
    }

    /// Frames, and whether each holds data.
    type Parts = Vec<(Vec<u8>, bool)>;
    type Units = Vec<Range<u64>>;

    /// The frames of `parts` laid end to end, as a walk should find them.
    fn laid_out(parts: &[(Vec<u8>, bool)]) -> (Vec<u8>, Vec<Frame>) {
        let (mut stream, mut want) = (Vec::new(), Vec::new());
        for (bytes, data) in parts {
            let at = stream.len() as u64..(stream.len() + bytes.len()) as u64;
            want.push(Frame { at, data: *data });
            stream.extend_from_slice(bytes);
        }
        (stream, want)
    }

    #[test]
    fn the_walk_finds_every_frame() {
        let t = text(300 * KIB, 1);
        let (hand_a, _) = by_hand(3, false, 3, &[Block::Raw(b"hello"), Block::Rle(b'z', 9000)]);
        let (hand_b, _) = by_hand(1, true, 2, &[Block::Rle(0, 300), Block::Raw(&t[..1000])]);
        let (hand_c, _) = by_hand(0, false, 1, &[Block::Raw(b""), Block::Raw(&t[..100])]);
        let (hand_d, _) = by_hand(2, false, 0, &[Block::Rle(7, 128 * KIB)]);
        let (hand_e, _) = by_hand(0, true, 0, &[Block::Raw(b"tiny")]);
        let d = |b: Vec<u8>| (b, true);
        let s = |b: Vec<u8>| (b, false);
        let cases: Vec<(&str, Parts)> = vec![
            ("one frame", vec![d(frame(&t, 3, true, true))]),
            (
                "libzstd's headers: sizes of 1, 2 and 4 bytes, none; with and without checksum",
                vec![
                    d(frame(b"small", 3, true, true)),
                    d(frame(&t[..1000], 3, false, true)),
                    d(frame(&t, 3, true, true)),
                    d(frame(&t, 3, false, false)),
                    d(frame(&t, 3, true, false)),
                    d(zstd::encode_all(&t[..], 1).unwrap()),
                ],
            ),
            (
                "hand-made headers: sizes of 8 bytes, dictionary ids, raw and RLE blocks",
                vec![d(hand_a), d(hand_b), d(hand_c), d(hand_d), d(hand_e)],
            ),
            (
                "zeros and noise: RLE and raw blocks",
                vec![
                    d(frame(&vec![0; MIB], 3, true, true)),
                    d(frame(&noise(300 * KIB, 2), 3, true, false)),
                ],
            ),
            (
                "skippable frames first, between and last",
                vec![
                    s(skippable(SKIPPABLE_MAGIC, b"")),
                    d(frame(&t, 3, true, true)),
                    s(skippable(SKIPPABLE_MAGIC | 7, &t[..5000])),
                    d(frame(&t, 1, false, true)),
                    s(skippable(SKIPPABLE_MAGIC | 0xF, b"table of contents")),
                ],
            ),
            (
                "empty frames",
                vec![d(frame(b"", 3, true, true)), d(frame(b"", 3, false, false))],
            ),
        ];
        for (name, parts) in cases {
            let (stream, want) = laid_out(&parts);
            let (_, one) = sequential(&stream);
            one.unwrap_or_else(|e| panic!("{name}: libzstd refuses the stream: {e}"));
            let got: Result<Vec<Frame>, _> =
                Frames::new(&stream[..], stream.len() as u64).collect();
            assert_eq!(got, Ok(want), "{name}");
        }
    }

    #[test]
    fn a_malformed_stream_stops_the_walk_and_fails_on_one_core() {
        let good = frame(&text(200 * KIB, 3), 3, true, true);
        let next = frame(&text(100 * KIB, 4), 3, true, true);
        let (reserved_block, _) = by_hand(0, false, 0, &[Block::Raw(b"ok"), Block::Reserved]);
        let (mut reserved_bit, _) = by_hand(0, false, 0, &[Block::Raw(b"ok")]);
        reserved_bit[4] |= 0x08;
        let toc = skippable(SKIPPABLE_MAGIC, &[1; 1000]);
        use Malformed::*;
        let cases: Vec<(&str, Vec<u8>, Malformed)> = vec![
            ("a reserved block type", reserved_block, ReservedBlock),
            ("the reserved bit", reserved_bit, ReservedBit),
            ("garbage after a frame", b"not a frame".to_vec(), Magic),
            ("cut in the magic number", next[..2].to_vec(), Cut),
            ("cut in the frame header", next[..5].to_vec(), Cut),
            ("cut in a block", next[..next.len() / 2].to_vec(), Cut),
            ("cut in the checksum", next[..next.len() - 2].to_vec(), Cut),
            ("cut in a skippable frame", toc[..500].to_vec(), Cut),
            ("cut in a skippable frame's size", toc[..6].to_vec(), Cut),
        ];
        for (name, tail, why) in cases {
            let stream = [good.clone(), tail].concat();
            let got: Vec<_> = Frames::new(&stream[..], stream.len() as u64).collect();
            let first = Frame {
                at: 0..good.len() as u64,
                data: true,
            };
            assert_eq!(got, vec![Ok(first), Err(why)], "{name}");
            assert_eq!(units(&stream[..], stream.len() as u64, 1), None, "{name}");
            assert!(sequential(&stream).1.is_err(), "{name}: libzstd takes it");
        }
    }

    #[test]
    fn small_frames_are_grouped_into_units() {
        // Hand-made frames of exactly `n` bytes: 9 of header, n - 9 raw bytes.
        let f = |n: usize| by_hand(0, false, 0, &[Block::Raw(&vec![1; n - 9])]).0;
        let skip = |n: usize| skippable(SKIPPABLE_MAGIC, &vec![2; n - 8]);
        let tens = vec![f(100); 10].concat();
        let cases: Vec<(&str, Vec<u8>, u64, Option<Units>)> = vec![
            (
                "ten frames, units of 250",
                tens.clone(),
                250,
                Some(vec![0..300, 300..600, 600..900, 900..1000]),
            ),
            (
                "ten frames, a unit each",
                tens.clone(),
                1,
                Some((0..10).map(|i| i * 100..i * 100 + 100).collect()),
            ),
            ("ten frames, one unit", tens.clone(), 1000, None),
            ("ten frames, less than a unit", tens, 5000, None),
            ("one data frame", [f(100), skip(100)].concat(), 1, None),
            (
                "a skippable frame between",
                [f(100), skip(100), f(100)].concat(),
                150,
                Some(vec![0..200, 200..300]),
            ),
            (
                "a big frame among small ones",
                [f(100), f(1000), f(100), f(100), f(100)].concat(),
                150,
                Some(vec![0..1100, 1100..1300, 1300..1400]),
            ),
        ];
        for (name, stream, min, want) in cases {
            assert_eq!(units(&stream[..], stream.len() as u64, min), want, "{name}");
        }
    }

    /// zstd:chunked's shape: a frame a file (here 64 KiB), skippable frames between, a footer.
    fn chunked_like(data: &[u8]) -> Vec<u8> {
        data.chunks(64 * KIB)
            .enumerate()
            .flat_map(|(i, c)| {
                let toc = skippable(SKIPPABLE_MAGIC | (i as u32 & 0xF), &c[..i % 100]);
                [frame(c, 3, true, true), toc].concat()
            })
            .chain(skippable(SKIPPABLE_MAGIC, b"footer"))
            .collect()
    }

    /// Streams of every kind, and whether the walk takes them.
    fn every_kind() -> Vec<(&'static str, Vec<u8>, bool)> {
        let prose = text(4 * MIB, 5);
        let rand = noise(2 * MIB, 6);
        let hand_a = [Block::Raw(b"hello"), Block::Rle(b'z', 90_000)];
        let hand_b = [Block::Rle(0, 300), Block::Raw(&prose[..1000])];
        let hand = [
            by_hand(3, false, 3, &hand_a).0,
            by_hand(1, true, 2, &hand_b).0,
            by_hand(0, true, 1, &[Block::Raw(b"tiny")]).0,
        ];
        let levels = [-5, 1, 3, 9, 19].iter().zip(prose.chunks(MIB));
        let huge = [
            frames(&prose[..MIB], 128 * KIB, 3),
            frame(&words(24 * MIB, 7), 3, true, false),
            frames(&rand[..MIB], 100 * KIB, 1),
        ];
        let one = frame(&prose, 3, true, true);
        let empty = [frame(b"", 3, true, true), frame(b"", 1, false, false)];
        vec![
            ("one frame", one.clone(), false),
            (
                "one frame and a skippable one",
                [one, skippable(SKIPPABLE_MAGIC, b"x")].concat(),
                false,
            ),
            ("many small frames", frames(&prose, 16 * KIB, 3), true),
            (
                "neither content size nor checksum",
                prose
                    .chunks(256 * KIB)
                    .flat_map(|c| frame(c, 3, false, false))
                    .collect(),
                true,
            ),
            (
                "streamed frames",
                prose
                    .chunks(MIB)
                    .flat_map(|c| zstd::encode_all(c, 3).unwrap())
                    .collect(),
                true,
            ),
            ("zstd:chunked-like", chunked_like(&prose), true),
            (
                "zeros: RLE blocks",
                frames(&vec![0; 16 * MIB], MIB, 3),
                true,
            ),
            ("noise: raw blocks", frames(&rand, 300 * KIB, 3), true),
            (
                "levels -5 to 19, with and without checksum and size",
                levels
                    .flat_map(|(&l, c)| frame(c, l, l % 2 == 1, l > 2))
                    .collect(),
                true,
            ),
            ("one huge frame among small ones", huge.concat(), true),
            ("empty frames", empty.concat(), true),
            ("hand-made headers", hand.concat(), true),
        ]
    }

    /// Streams of every kind, decoded on 2 and 4 workers in units of a frame and of 256 KiB.
    #[test]
    fn byte_equal_to_one_core_on_every_kind_of_stream() {
        for (name, blob, many) in every_kind() {
            let (want, one) = sequential(&blob);
            one.unwrap_or_else(|e| panic!("{name}: one core fails: {e}"));
            for (threads, min) in [(2, 1), (4, 1), (2, 256 * KIB as u64), (4, 256 * KIB as u64)] {
                let what = format!("{name} ({threads} threads, units of {min})");
                let Some((got, read)) = parallel(&blob, threads, min) else {
                    assert!(!many || min > 1, "{what}: not decoded on many cores");
                    continue;
                };
                assert!(many, "{what}: decoded on many cores");
                read.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(got == want, "{what}: differs");
            }
        }
    }

    /// A seeded corpus: frames of text, noise and runs of random sizes, levels and header flags,
    /// skippable frames among them, on 2 to 5 workers in units of random sizes.
    #[test]
    fn random_streams_are_byte_equal_to_one_core() {
        let mut x = seed();
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for case in 0..10 {
            let (mut blob, mut data) = (Vec::new(), Vec::new());
            for part in 0..1 + next(12) {
                let len = next(512 * KIB as u64) as usize;
                let s = case * 16 + part;
                let content = match next(3) {
                    0 => text(len, s),
                    1 => noise(len, s),
                    _ => vec![next(256) as u8; len],
                };
                let level = next(16) as i32 - 3;
                blob.extend(frame(&content, level, next(2) == 0, next(2) == 0));
                data.extend(content);
                if next(4) == 0 {
                    let magic = SKIPPABLE_MAGIC | next(16) as u32;
                    blob.extend(skippable(magic, &noise(next(2000) as usize, s)));
                }
            }
            let threads = 2 + next(4) as usize;
            let min = [1, 4 * KIB as u64, 100 * KIB as u64, MIB as u64][next(4) as usize];
            let what = format!("case {case} ({threads} threads, units of {min})");
            assert!(sequential(&blob).0 == data, "{what}: one core differs");
            if let Some((got, read)) = parallel(&blob, threads, min) {
                read.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(got == data, "{what}: differs");
            }
        }
    }

    #[test]
    fn cut_and_corrupt_streams_fail_as_on_one_core() {
        const EACH: usize = 256 * KIB;
        let data = text(16 * EACH, 10);
        let parts: Vec<Vec<u8>> = data
            .chunks(EACH)
            .map(|c| frame(c, 3, true, true))
            .chain([skippable(SKIPPABLE_MAGIC, &[3; 4000])])
            .collect();
        let blob = parts.concat();
        let start = |i: usize| parts[..i].iter().map(Vec::len).sum::<usize>();
        let flip = |at: usize, len: usize| {
            let mut b = blob.clone();
            b[at..at + len].iter_mut().for_each(|x| *x ^= 0x5a);
            b
        };
        // The frame that fails, where the walk takes the stream whole.
        let cases: Vec<(&str, Vec<u8>, Option<usize>)> = vec![
            ("cut in the middle", blob[..blob.len() / 2].to_vec(), None),
            ("cut in a frame header", blob[..start(9) + 6].to_vec(), None),
            ("cut in a checksum", blob[..start(9) - 2].to_vec(), None),
            (
                "cut in the last skippable frame",
                blob[..blob.len() - 9].to_vec(),
                None,
            ),
            (
                "a frame corrupt in its middle",
                flip(start(8) + parts[8].len() / 3, 64),
                Some(8),
            ),
            (
                "the first frame corrupt",
                flip(parts[0].len() / 3, 64),
                Some(0),
            ),
            ("a corrupt checksum", flip(start(9) - 3, 1), Some(8)),
            (
                "the last frame's checksum corrupt",
                flip(start(16) - 4, 1),
                Some(15),
            ),
        ];
        // Units of a frame, and of several: a unit's output before its error comes too.
        let cases = cases
            .into_iter()
            .flat_map(|c| [(c.clone(), 1), (c, 300 * KIB as u64)]);
        for ((name, bad, failing), min) in cases {
            let (one_out, one) = sequential(&bad);
            assert!(one.is_err(), "{name}: libzstd takes it");
            let (out, read) = match parallel(&bad, 4, min) {
                Some(decoded) => decoded,
                None => sequential(&bad),
            };
            let walked = units(&bad[..], bad.len() as u64, min).is_some();
            assert_eq!(failing.is_some(), walked, "{name}: the path taken");
            let (one, read) = (one.unwrap_err(), read.expect_err(name));
            assert_eq!(one.kind(), read.kind(), "{name}: {one} / {read}");
            assert_eq!(one.to_string(), read.to_string(), "{name}");
            let Some(k) = failing else {
                assert!(out == one_out, "{name}: differs");
                continue;
            };
            // The frames before the failing one whole, nothing of those after it: how much of
            // the failing frame libzstd gives before its error depends on its buffers' sizes.
            for (who, out) in [("one core", &one_out), ("many", &out)] {
                assert!(out.len() >= k * EACH, "{name}, {who}: {} bytes", out.len());
                assert!(
                    out[..k * EACH] == data[..k * EACH],
                    "{name}, {who}: differs"
                );
                assert!(
                    out.len() <= (k + 1) * EACH,
                    "{name}, {who}: {} bytes",
                    out.len()
                );
            }
        }
    }

    /// The source's strong count: the reader and its workers each hold it while they live.
    #[test]
    fn dropping_the_reader_stops_its_workers() {
        let zeros = frames(&vec![0; 256 * MIB], 32 * MIB, 3);
        let small = frames(&text(8 * MIB, 11), 256 * KIB, 3);
        let cases: [(&str, &Vec<u8>, usize); 4] = [
            ("before a read; workers hand pieces over", &zeros, 0),
            ("mid-stream; workers hand pieces over", &zeros, 3 * MIB),
            ("mid-stream; workers wait for units", &small, MIB),
            ("at the end", &small, usize::MAX),
        ];
        let _turn = crate::lock(&ONE_AT_A_TIME);
        for (name, blob, read) in cases {
            let src = Arc::new(blob.clone());
            let units = units(&src[..], blob.len() as u64, 1).unwrap();
            let mut r = FrameReader::start(src.clone(), units, 4).unwrap();
            let mut sink = Vec::new();
            (&mut r).take(read as u64).read_to_end(&mut sink).unwrap();
            let (done, dropped) = std::sync::mpsc::channel();
            let t0 = Instant::now();
            std::thread::spawn(move || {
                drop(r);
                let _ = done.send(());
            });
            let waited = dropped.recv_timeout(Duration::from_secs(20));
            assert!(waited.is_ok(), "{name}: dropping the reader hangs");
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{name}: {:?}",
                t0.elapsed()
            );
            assert_eq!(Arc::strong_count(&src), 1, "{name}: a worker lives on");
        }
    }

    /// A consumer reading `chunk` bytes at a time: its output up to its error, and the error.
    fn read_by(r: &mut impl Read, chunk: usize) -> (Vec<u8>, io::Result<()>) {
        let (mut out, mut buf) = (Vec::new(), vec![0; chunk]);
        loop {
            match r.read(&mut buf) {
                Ok(0) => return (out, Ok(())),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return (out, Err(e)),
            }
        }
    }

    /// The one-core decoder read `chunk` bytes at a time (a tar reader reads 512).
    fn sequential_by(blob: &[u8], chunk: usize) -> (Vec<u8>, io::Result<()>) {
        match decompress(Box::new(blob)) {
            Ok(mut d) => read_by(&mut d, chunk),
            Err(e) => (Vec::new(), Err(e)),
        }
    }

    /// A frame's header, by hand: `descriptor`, then the window descriptor `window` where the
    /// frame is not a single segment, a dictionary id and a content size of the descriptor's
    /// lengths (`id`, `fcs`: their values, little-endian).
    fn header(descriptor: u8, window: u8, id: u32, fcs: u64) -> Vec<u8> {
        let mut h = FRAME_MAGIC.to_le_bytes().to_vec();
        h.push(descriptor);
        if descriptor & 0x20 == 0 {
            h.push(window);
        }
        h.extend_from_slice(&id.to_le_bytes()[..[0, 1, 2, 4][usize::from(descriptor & 3)]]);
        let single = u64::from(descriptor & 0x20 != 0);
        let fcs_len = [single, 2, 4, 8][usize::from(descriptor >> 6)] as usize;
        let fcs = if descriptor >> 6 == 1 { fcs - 256 } else { fcs };
        h.extend_from_slice(&fcs.to_le_bytes()[..fcs_len]);
        h
    }

    /// A block header: `kind` 0 raw, 1 RLE, 2 compressed; `size`; whether it is the last.
    fn block(kind: u32, size: u32, last: bool) -> Vec<u8> {
        (u32::from(last) | kind << 1 | size << 3).to_le_bytes()[..3].to_vec()
    }

    /// libzstd decodes a frame whose content fits the reader's buffer in one pass, the others a
    /// block at a time, and the one-pass decoder takes frames the other refuses: the same stream
    /// decodes or fails by the size of the reads. A worker's reads are not the one-core
    /// reader's: the walk stops at such frames, and the one-core decoder reads them as before.
    #[test]
    fn frames_libzstd_decodes_by_the_read_size_stop_the_walk() {
        let good = |s| frame(&text(300 * KIB, s), 3, true, true);
        // A single segment of 200 KiB: its window and block maximum 200 KiB, at most 128 KiB.
        let rle = [
            header(2 << 6 | 0x20, 0, 0, 200 * KIB as u64),
            block(1, 200 * KIB as u32, true),
            vec![b'x'],
        ]
        .concat();
        let raw = [
            header(2 << 6, 10 << 3, 0, 200 * KIB as u64),
            block(0, 200 * KIB as u32, true),
            vec![b'r'; 200 * KIB],
        ]
        .concat();
        // A window of 2 GiB (log 31), over libzstd's limit of 128 MiB, content 1000 bytes.
        let wide = [
            header(1 << 6, 21 << 3, 0, 1000),
            block(0, 1000, true),
            vec![b'w'; 1000],
        ]
        .concat();
        let cases = [
            (
                "an RLE block over the block maximum",
                rle,
                Malformed::BlockSize,
            ),
            ("a raw block over 128 KiB", raw, Malformed::BlockSize),
            ("a window over libzstd's limit", wide, Malformed::Window),
        ];
        for (name, bad, why) in cases {
            let blob = [good(1), bad, good(2)].concat();
            let (small, read_small) = sequential_by(&blob, 512);
            let (big, read_big) = sequential_by(&blob, MIB);
            // libzstd's own doing: were it to decode such frames one way only, no need to stop.
            assert!(
                read_small.is_err() && read_big.is_ok() && small.len() < big.len(),
                "{name}: one core reads it the same by 512 bytes and by 1 MiB"
            );
            let walked: Vec<_> = Frames::new(&blob[..], blob.len() as u64).collect();
            assert_eq!(walked.len(), 2, "{name}: {walked:?}");
            assert_eq!(walked[1], Err(why), "{name}");
            assert_eq!(units(&blob[..], blob.len() as u64, 1), None, "{name}");
        }
        // At the limits, the walk goes on: a window of 128 MiB, blocks of the block maximum.
        let edges = [
            [
                header(0, 17 << 3, 0, 0),
                block(1, 128 * KIB as u32, false),
                vec![1],
                block(0, 10, true),
                vec![2; 10],
            ]
            .concat(),
            [
                header(0x20, 0, 0, 200),
                block(1, 100, false),
                vec![3],
                block(0, 100, true),
                vec![4; 100],
            ]
            .concat(),
        ];
        let blob = [good(3), edges[0].clone(), edges[1].clone(), good(4)].concat();
        let (want, one) = sequential_by(&blob, 512);
        one.expect("libzstd takes frames at the limits");
        let (got, read) = parallel(&blob, 2, 1).expect("the walk stops at the limits");
        read.unwrap();
        assert!(got == want, "frames at the limits differ");
    }

    /// Hand-made frames between two of libzstd's, each as a published layer may hold it: where
    /// the walk takes the stream, its output and error are the one-core decoder's, read 512 bytes
    /// at a time as a tar reader does and 1 MiB at a time alike.
    #[test]
    fn hand_made_frames_decode_and_fail_as_on_one_core() {
        let good = |s| frame(&text(300 * KIB, s), 3, true, true);
        let w = 10 << 3; // a window of 1 MiB
        let raw = |n: usize, last| [block(0, n as u32, last), vec![b'r'; n]].concat();
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            (
                "an empty compressed block",
                [header(0, w, 0, 0), block(2, 0, false), raw(10, true)].concat(),
                true,
            ),
            (
                "the unused descriptor bit set",
                [header(0x10, w, 0, 0), raw(10, true)].concat(),
                true,
            ),
            (
                "a dictionary id",
                [header(0x01, w, 7, 0), raw(10, true)].concat(),
                true,
            ),
            (
                "a dictionary id of 4 bytes, and a content size",
                [header(2 << 6 | 0x03, w, 0xdead_beef, 10), raw(10, true)].concat(),
                true,
            ),
            (
                "a content size larger than the content",
                [header(2 << 6, w, 0, 11), raw(10, true)].concat(),
                true,
            ),
            (
                "a content size smaller than the content",
                [header(3 << 6, w, 0, 9), raw(10, true)].concat(),
                true,
            ),
            (
                "a content size of 2^64 - 1: unknown to libzstd",
                [header(3 << 6, w, 0, u64::MAX), raw(10, true)].concat(),
                true,
            ),
            (
                "a content size of 2^64 - 2",
                [header(3 << 6, w, 0, u64::MAX - 1), raw(10, true)].concat(),
                true,
            ),
            (
                "a single segment of 2^64 - 1 bytes",
                [header(3 << 6 | 0x20, 0, 0, u64::MAX), raw(10, true)].concat(),
                false,
            ),
            (
                "a wrong checksum",
                [header(0x04, w, 0, 0), raw(10, true), vec![0; 4]].concat(),
                true,
            ),
            (
                "a compressed block of garbage",
                [header(0, w, 0, 0), block(2, 100, true), noise(100, 9)].concat(),
                true,
            ),
            (
                "a window of 1 KiB and an RLE block over it",
                [header(0, 0, 0, 0), block(1, 2000, true), vec![1]].concat(),
                false,
            ),
            (
                "a window of 2 GiB, no content size",
                [header(0, 21 << 3, 0, 0), raw(10, true)].concat(),
                false,
            ),
            (
                "no last block: blocks run into the next frame",
                [header(0, w, 0, 0), raw(10, false)].concat(),
                false,
            ),
            (
                "a skippable frame of 4 GiB",
                [
                    skippable(SKIPPABLE_MAGIC, b"x")[..4].to_vec(),
                    vec![0xff; 4],
                ]
                .concat(),
                false,
            ),
        ];
        for (name, odd, walks) in cases {
            let blob = [good(1), odd, good(2), good(3)].concat();
            let (small, one) = sequential_by(&blob, 512);
            let (big, one_big) = sequential_by(&blob, MIB);
            let units = units(&blob[..], blob.len() as u64, 1);
            assert_eq!(units.is_some(), walks, "{name}: the path taken");
            let Some(units) = units else { continue };
            let _turn = crate::lock(&ONE_AT_A_TIME);
            let mut r = FrameReader::start(blob.clone(), units, 3).unwrap();
            let (out, many) = read_by(&mut r, 512);
            drop(r);
            let error = |r: &io::Result<()>| r.as_ref().err().map(|e| (e.kind(), e.to_string()));
            assert_eq!(error(&many), error(&one), "{name}: by 512 bytes");
            assert_eq!(error(&many), error(&one_big), "{name}: by 1 MiB");
            if many.is_ok() {
                assert!(out == small && out == big, "{name}: differs");
                continue;
            }
            // The frames before the odd one whole; the others are cut where libzstd's buffers
            // say, a prefix of the same bytes.
            let first = 300 * KIB;
            for (who, o) in [
                ("many", &out),
                ("one by 512", &small),
                ("one by 1 MiB", &big),
            ] {
                assert!(o.len() >= first, "{name}, {who}: {} bytes", o.len());
                let n = o.len().min(out.len());
                assert!(o[..n] == out[..n], "{name}, {who}: differs");
            }
        }
    }

    /// A source that breaks, once the walk is done, under the workers: an error, or a panic.
    struct Breaking {
        blob: Vec<u8>,
        from: u64,
        broken: AtomicBool,
        panics: bool,
    }

    impl ReadAt for Breaking {
        fn len(&self) -> io::Result<u64> {
            Ok(self.blob.len() as u64)
        }

        fn read_at(&self, at: u64, buf: &mut [u8]) -> io::Result<usize> {
            if self.broken.load(Ordering::Relaxed) && at + buf.len() as u64 > self.from {
                assert!(!self.panics, "a source that panics");
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, "gone"));
            }
            self.blob.as_slice().read_at(at, buf)
        }
    }

    /// `r` dropped on another thread: whether that ends within seconds.
    fn drops_promptly<T: Send + 'static>(r: T) -> bool {
        let (done, dropped) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(r);
            let _ = done.send(());
        });
        dropped.recv_timeout(Duration::from_secs(10)).is_ok()
    }

    /// A unit that fails while the workers after it wait on full hand-overs: the error comes,
    /// again on every later read, and the workers end. So too where the source fails or panics
    /// under a worker, its unit not the first.
    #[test]
    fn a_failing_unit_ends_the_workers_blocked_behind_it() {
        let zeros = frames(&vec![0; 96 * MIB], 32 * MIB, 3);
        let first = frame(&text(MIB, 12), 3, true, true);
        let mut corrupt = first.clone();
        let mid = corrupt.len() / 2;
        corrupt[mid..mid + 64].iter_mut().for_each(|x| *x ^= 0x5a);
        let (_, one) = sequential(&[corrupt.clone(), zeros.clone()].concat());
        let one = one.unwrap_err();
        let _turn = crate::lock(&ONE_AT_A_TIME);
        for (name, stream) in [("first", corrupt), ("sound", first.clone())] {
            let blob = [stream, zeros.clone()].concat();
            for panics in [false, true] {
                let name = format!("{name} frame, source panics: {panics}");
                let src = Arc::new(Breaking {
                    from: first.len() as u64 + 10,
                    broken: AtomicBool::new(false),
                    blob: blob.clone(),
                    panics,
                });
                let units = units(&*src, blob.len() as u64, 1).unwrap();
                let mut r = FrameReader::start(src.clone(), units, 4).unwrap();
                src.broken
                    .store(name.starts_with("sound"), Ordering::Relaxed);
                // The workers of the zeros fill their hand-overs meanwhile.
                std::thread::sleep(Duration::from_millis(300));
                let (_, read) = read_by(&mut r, 64 * KIB);
                let e = read.expect_err(&name);
                let again = r.read(&mut [0; 10]).expect_err(&name);
                assert_eq!((e.kind(), e.to_string()), (again.kind(), again.to_string()));
                let want = match (name.starts_with("sound"), panics) {
                    (false, _) => (one.kind(), one.to_string()),
                    (true, false) => (io::ErrorKind::PermissionDenied, "gone".into()),
                    (true, true) => (
                        io::ErrorKind::Other,
                        "a thread decoding zstd frames ended early".into(),
                    ),
                };
                assert_eq!((e.kind(), e.to_string()), want, "{name}");
                assert!(drops_promptly(r), "{name}: dropping the reader hangs");
                assert_eq!(Arc::strong_count(&src), 1, "{name}: a worker lives on");
            }
        }
    }

    /// A layer of a million empty frames, 9 bytes each: the walk keeps units, not frames, a few
    /// of them, and the stream decodes to nothing as on one core.
    #[test]
    fn a_million_empty_frames_walk_into_a_few_units() {
        let empty = [header(0x20, 0, 0, 0), block(0, 0, true)].concat();
        assert_eq!(empty.len(), 9);
        let blob = empty.repeat(1_000_000);
        let t0 = Instant::now();
        let units = units(&blob[..], blob.len() as u64, UNIT).expect("the walk takes them");
        assert_eq!(units.len(), 3, "{units:?}");
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        let (got, read) = parallel(&blob, 2, UNIT).unwrap();
        read.unwrap();
        assert!(got.is_empty());
        let (one, read) = sequential(&blob);
        read.unwrap();
        assert!(one.is_empty());
    }
}
