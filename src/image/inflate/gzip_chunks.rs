//! One gzip member inflated on many cores by the marker/window method of rapidgzip (Knespel and
//! Brunst, 2023). Workers each find a block start in their part of the deflate stream and decode
//! from it without the 32 KiB of output before it; reading takes the parts in order and fills in
//! the bytes copied from that unknown window from the part before. Where a part does not start
//! at the block the part before ends at, or failed, reading decodes it itself: the output and
//! the errors are the one-core decoder's.
//!
//! The unknown window needs no decoder of our own: zlib decodes a part three times in step, with
//! three made-up windows whose bytes name their position (its low byte, its high byte, the low
//! byte xor 0x55). A byte the first and third agree on is the data's; any other copies the window
//! position the first two name. Once 32 KiB in a row hold no window byte, one decoder goes on.
//! Own code rather than rapidgzip-core: its self-timing keeps real layers on one core, and its
//! own marker decoder runs at an eighth of zlib's speed (benches/README.md).

use std::collections::VecDeque;
use std::io::{self, BufReader, Read};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use super::zlib_raw::{RawInflate, Stop};
use super::{read_exact_at, ReadAt};

const WINDOW: usize = 32 << 10;
/// Output a decoder step appends at most (a step also ends at each block's end).
const STEP: usize = 256 << 10;

/// How a stream is cut into parts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sizes {
    /// Compressed bytes a worker searches for a block start from and decodes on to.
    pub part: u64,
    /// A part that decodes to more is left to reading, which streams it (a long run of zeros).
    pub max_out: usize,
}

pub(super) const SIZES: Sizes = Sizes {
    part: 4 << 20,
    max_out: 32 << 20,
};

/// Where a decoded run of the stream ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// At the end of a block, at or past the next part's start: that bit of the span.
    Block(u64),
    /// At the end of the last block; the member's trailer starts at this byte.
    Last(u64),
}

/// A span's bytes from a position on, read `piece` bytes at a time.
struct Input<S: ?Sized> {
    src: Arc<S>,
    /// The span offset of `buf[0]`.
    pos: u64,
    buf: Vec<u8>,
    at: usize,
    piece: usize,
}

impl<S: ReadAt + ?Sized> Input<S> {
    /// The bytes not consumed yet, read on when none are left; empty at the span's end.
    fn bytes(&mut self) -> io::Result<&[u8]> {
        if self.at == self.buf.len() {
            self.pos += self.buf.len() as u64;
            self.buf.resize(self.piece, 0);
            self.at = 0;
            let n = self.src.read_at(self.pos, &mut self.buf)?;
            self.buf.truncate(n);
        }
        Ok(&self.buf[self.at..])
    }
}

/// One or two zlib decoders reading the same bytes in step from a bit of the span.
struct Lanes<S: ?Sized> {
    zs: Vec<RawInflate>,
    outs: Vec<Vec<u8>>,
    input: Input<S>,
    /// The span offset of the first byte given to zlib, and how many it has read since.
    first: u64,
    read: u64,
}

impl<S: ReadAt + ?Sized> Lanes<S> {
    /// A decoder for each of `windows` (the output before `bit`) at `bit` of `src`, taken from
    /// `spare` where it has some.
    fn start(
        src: Arc<S>,
        bit: u64,
        windows: &[&[u8]],
        piece: usize,
        spare: &mut Vec<RawInflate>,
    ) -> io::Result<Self> {
        let byte = bit / 8;
        let mut input = Input {
            src,
            pos: byte,
            buf: Vec::new(),
            at: 0,
            piece,
        };
        // A start inside a byte: zlib takes that byte's last bits before the bytes after it.
        let shift = (bit % 8) as u8;
        let (bits, value) = match shift {
            0 => (0, 0),
            _ => {
                let b = *input.bytes()?.first().ok_or_else(cut)?;
                input.at += 1;
                (8 - shift, b >> shift)
            }
        };
        let mut zs = Vec::with_capacity(windows.len());
        for w in windows {
            let mut z = match spare.pop() {
                Some(z) => z,
                None => RawInflate::new()?,
            };
            z.restart(bits, value, w)?;
            zs.push(z);
        }
        let first = byte + u64::from(shift > 0);
        let outs = vec![Vec::new(); zs.len()];
        Ok(Self {
            zs,
            outs,
            input,
            first,
            read: 0,
        })
    }

    /// The bit of the span the decoders are at.
    fn bit(&self) -> u64 {
        (self.first + self.read) * 8 - self.zs[0].unread_bits()
    }

    /// Up to `room` more bytes onto each output; where the decoders stopped.
    fn step(&mut self, room: usize) -> io::Result<Stop> {
        let input = self.input.bytes()?;
        let mut ran = Vec::with_capacity(self.zs.len());
        for (z, out) in self.zs.iter_mut().zip(&mut self.outs) {
            ran.push(z.run(input, out, room)?);
        }
        if ran.windows(2).any(|w| w[0] != w[1]) {
            return Err(io::Error::other(
                "the made-up windows' decoders went out of step",
            ));
        }
        let ran = ran[0];
        if ran.read == 0 && ran.wrote == 0 && ran.stop == Stop::Midway {
            return Err(if input.is_empty() {
                cut()
            } else {
                io::Error::other("zlib made no progress")
            });
        }
        self.input.at += ran.read;
        self.read += ran.read as u64;
        Ok(ran.stop)
    }

    /// Where a run that is to stop at the first block end at or past `next` has ended, if it has.
    fn ended(&self, stop: Stop, next: u64) -> Option<End> {
        match stop {
            Stop::BlockEnd if self.bit() >= next => Some(End::Block(self.bit())),
            Stop::StreamEnd => Some(End::Last(self.bit().div_ceil(8))),
            _ => None,
        }
    }
}

fn cut() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the gzip stream ends early")
}

/// The two made-up windows: byte `p` of the first is `p`'s low byte; of the second, its high
/// byte with the top bit the first's flipped, so that the two differ at every position.
fn made_up_windows() -> &'static [Vec<u8>; 2] {
    static WINDOWS: OnceLock<[Vec<u8>; 2]> = OnceLock::new();
    WINDOWS.get_or_init(|| {
        let low = (0..WINDOW).map(|p| p as u8).collect();
        let high = (0..WINDOW)
            .map(|p| (p >> 8) as u8 | (!p as u8 & 0x80))
            .collect();
        [low, high]
    })
}

/// The window position a byte decoded from the made-up windows copies, if it copies one.
fn window_position(low: u8, high: u8) -> Option<usize> {
    (low != high).then(|| usize::from(low) | usize::from(high & 0x7f) << 8)
}

/// A part decoded without the window before it.
struct Part {
    /// The bits any of which it starts at (one, or the zero bits before a stored block's padding).
    starts: Range<u64>,
    out: Vec<u8>,
    /// `out[..marked]` may hold window bytes: with `high`, the position each copies.
    marked: usize,
    high: Vec<u8>,
    /// The CRC-32 of `out[marked..]`.
    tail: crc32fast::Hasher,
    end: End,
}

/// From `start` (a bit of `src`) to the first block end at or past `next`, without the window.
fn decode_blind<S: ReadAt + ?Sized>(
    src: Arc<S>,
    starts: Range<u64>,
    next: u64,
    sizes: Sizes,
    cancel: &AtomicBool,
) -> io::Result<Part> {
    let [low, high] = made_up_windows();
    let mut lanes = Lanes::start(src, starts.start, &[low, high], 1 << 20, &mut Vec::new())?;
    // One past the last byte the made-up windows decode differently.
    let mut marked = 0;
    let end = loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(io::Error::other("inflating stopped"));
        }
        let before = lanes.outs[0].len();
        let stop = lanes.step(STEP)?;
        if lanes.zs.len() == 2 {
            let (a, b) = (&lanes.outs[0][before..], &lanes.outs[1][before..]);
            if let Some(i) = a.iter().zip(b).rposition(|(x, y)| x != y) {
                marked = before + i + 1;
            }
            // The window has left the decoders' own 32 KiB: they decode alike from here.
            if lanes.outs[0].len() - marked >= WINDOW {
                lanes.zs.truncate(1);
            }
        }
        if lanes.outs[0].len() > sizes.max_out {
            return Err(io::Error::other(
                "a part decodes to more than a part may hold",
            ));
        }
        if let Some(end) = lanes.ended(stop, next) {
            break end;
        }
    };
    let mut outs = lanes.outs.into_iter();
    let out = outs.next().unwrap_or_default();
    let mut high = outs.next().unwrap_or_default();
    high.truncate(marked);
    let mut tail = crc32fast::Hasher::new();
    tail.update(&out[marked..]);
    Ok(Part {
        starts,
        out,
        marked,
        high,
        tail,
        end,
    })
}

/// Whether a dynamic-Huffman block that is not the last can start at bit 0 of `v`: header
/// counts in range and a complete code for the code lengths (zlib refuses any other). Tables
/// answer for 12 bits at once: the finder asks at every bit of a part.
fn plausible_header(v: u128) -> bool {
    let tables = header_tables();
    if !tables.head[(v & 0x1fff) as usize] {
        return false;
    }
    let lengths = ((v >> 13) & 15) as u32 + 4;
    let precode = (v >> 17) as u64 & ((1 << (3 * lengths)) - 1);
    let kraft: u32 = (0..5)
        .map(|i| u32::from(tables.kraft[(precode >> (12 * i)) as usize & 0xfff]))
        .sum();
    kraft == 128
}

struct HeaderTables {
    /// By the first 13 bits: not last, dynamic Huffman, HLIT and HDIST in range.
    head: Vec<bool>,
    /// By four 3-bit code lengths: their share of a complete code, in 128ths.
    kraft: Vec<u8>,
}

fn header_tables() -> &'static HeaderTables {
    static TABLES: OnceLock<HeaderTables> = OnceLock::new();
    TABLES.get_or_init(|| HeaderTables {
        head: (0..1u32 << 13)
            .map(|v| v & 7 == 0b100 && (v >> 3) & 31 <= 29 && (v >> 8) & 31 <= 29)
            .collect(),
        kraft: (0..1u32 << 12)
            .map(|v| {
                let lens = (0..4).map(|i| (v >> (3 * i)) & 7).filter(|&l| l > 0);
                lens.map(|l| 1u32 << (7 - l)).sum::<u32>().min(255) as u8
            })
            .collect(),
    })
}

/// Whether zlib, with a window of zeros, decodes from `bit` through two block ends (or the
/// stream's end, or a MiB) without an error. `spare`: a decoder to use and give back.
fn decodes_from<S: ReadAt + ?Sized>(src: &Arc<S>, bit: u64, spare: &mut Vec<RawInflate>) -> bool {
    let zeros = [0u8; WINDOW];
    let Ok(mut lanes) = Lanes::start(src.clone(), bit, &[&zeros], 16 << 10, spare) else {
        return false;
    };
    let (mut ends, mut wrote) = (0, 0);
    let decodes = loop {
        if wrote >= 4 * STEP {
            break true;
        }
        match lanes.step(STEP) {
            Ok(Stop::StreamEnd) => break true,
            Ok(Stop::BlockEnd) if ends == 1 => break true,
            Ok(Stop::BlockEnd) => ends += 1,
            Ok(Stop::Midway) => {}
            Err(_) => break false,
        }
        wrote += lanes.outs[0].len();
        lanes.outs[0].clear();
    };
    spare.append(&mut lanes.zs);
    decodes
}

/// Where a stored block can start in byte `i` of `buf`: its length and the length's complement
/// follow the byte, and the byte's bits from the header on are zero (encoders pad with zeros).
/// The bits from the lowest such bit to the last a 3-bit header fits at all start the same block.
fn stored_starts(buf: &[u8], i: usize) -> Option<Range<u8>> {
    let len = u16::from_le_bytes([buf[i + 1], buf[i + 2]]);
    let nlen = u16::from_le_bytes([buf[i + 3], buf[i + 4]]);
    let lowest = 8 - buf[i].leading_zeros() as u8;
    (len == !nlen && lowest <= 5).then_some(lowest..6)
}

/// The first block start in bytes `from..to` of `src` that zlib decodes from: the bits that all
/// start it (one, or the zero bits before a stored block's padding).
fn find_start<S: ReadAt + ?Sized>(
    src: &Arc<S>,
    from: u64,
    to: u64,
    cancel: &AtomicBool,
) -> io::Result<Option<Range<u64>>> {
    let mut buf = vec![0u8; (64 << 10) + 16];
    let mut spare = Vec::new();
    let mut at = from;
    while at < to && !cancel.load(Ordering::Relaxed) {
        let n = read_at_most(&**src, at, &mut buf)?;
        if n < 16 {
            return Ok(None);
        }
        let scan = (n - 15).min(usize::try_from(to - at).unwrap_or(usize::MAX));
        for i in 0..scan {
            let v = u128::from_le_bytes(buf[i..i + 16].try_into().expect("16 bytes"));
            let stored = stored_starts(&buf, i);
            let byte = (at + i as u64) * 8;
            for shift in 0..8 {
                let bits = match &stored {
                    Some(r) if r.start == shift => {
                        byte + u64::from(r.start)..byte + u64::from(r.end)
                    }
                    _ if plausible_header(v >> shift) => {
                        byte + u64::from(shift)..byte + u64::from(shift) + 1
                    }
                    _ => continue,
                };
                if decodes_from(src, bits.start, &mut spare) {
                    return Ok(Some(bits));
                }
            }
        }
        at += scan as u64;
    }
    Ok(None)
}

/// `buf` filled from `at` as far as `src` goes: how far.
fn read_at_most<S: ReadAt + ?Sized>(src: &S, at: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read_at(at + n as u64, &mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Part `k`'s bytes begin at `first + k * part`, and its decoding stops at the first block end
/// from the next part's first bit on.
struct Layout {
    first: u64,
    parts: u64,
    sizes: Sizes,
}

impl Layout {
    fn first_byte(&self, k: u64) -> u64 {
        self.first + k * self.sizes.part
    }

    fn next_bit(&self, k: u64) -> u64 {
        self.first_byte(k + 1) * 8
    }
}

/// What the workers and reading share.
struct Shared<S: ?Sized> {
    layout: Layout,
    /// The bit reading has decoded to: a part ending before it is not decoded.
    reached: AtomicU64,
    cancel: AtomicBool,
    src: Arc<S>,
}

type Job = (u64, SyncSender<Option<Part>>);

/// A worker: parts from `jobs` until reading stops. A part it cannot start or decode is `None`:
/// reading decodes it and meets the error, if the stream has one there.
fn work<S: ReadAt + ?Sized>(jobs: &Mutex<Receiver<Job>>, shared: &Shared<S>) {
    loop {
        // The lock is held only while waiting for a part, not while decoding it.
        let Ok((k, tx)) = crate::lock(jobs).recv() else {
            return;
        };
        let _ = tx.send(blind_part(shared, k));
    }
}

/// Part `k` decoded without the window before it; `None` where reading has passed it already,
/// where no block start is found in it, or where it fails.
fn blind_part<S: ReadAt + ?Sized>(shared: &Shared<S>, k: u64) -> Option<Part> {
    let layout = &shared.layout;
    let (from, next) = (layout.first_byte(k), layout.next_bit(k));
    if shared.reached.load(Ordering::Relaxed) >= next {
        return None;
    }
    let starts = match k {
        0 => from * 8..from * 8 + 1,
        _ => find_start(&shared.src, from, layout.first_byte(k + 1), &shared.cancel).ok()??,
    };
    decode_blind(
        shared.src.clone(),
        starts,
        next,
        layout.sizes,
        &shared.cancel,
    )
    .ok()
}

/// A gzip member's output in order, its parts decoded on worker threads; then the members after
/// it, on one core.
pub(super) struct GzipReader<S: ReadAt + Send + Sync + 'static> {
    shared: Arc<Shared<S>>,
    /// Parts not handed out yet start at this one.
    waiting: u64,
    jobs: Option<Sender<Job>>,
    handed: VecDeque<(u64, Receiver<Option<Part>>)>,
    workers: Vec<JoinHandle<()>>,
    by_hand: Option<ByHand<S>>,
    /// A part that starts where the output so far ends.
    ready: Option<Part>,
    /// The last 32 KiB of output, the CRC-32 and length of all of it.
    window: Vec<u8>,
    crc: crc32fast::Hasher,
    size: u64,
    piece: Vec<u8>,
    at: usize,
    /// The members after the first, once it has ended.
    after: Option<Box<dyn Read + Send>>,
    failed: Option<(io::ErrorKind, String)>,
    /// Parts taken from the workers, and decoded by reading.
    pub(super) taken: u64,
    pub(super) by_hand_count: u64,
}

/// A part reading decodes itself: to the first block end at or past `next`, or to where a
/// worker's part waiting to be taken starts.
struct ByHand<S: ?Sized> {
    lanes: Lanes<S>,
    next: u64,
    waiting: Option<Part>,
}

/// `src`, a gzip stream, read with its first member's parts decoded on up to `threads` cores;
/// `None` where it is too short to gain from them or its header is not the plain one layers have.
pub(super) fn start<S: ReadAt + Send + Sync + 'static>(
    src: Arc<S>,
    threads: usize,
    sizes: Sizes,
) -> io::Result<Option<GzipReader<S>>> {
    let len = src.len()?;
    let Some(first) = deflate_start(&*src)? else {
        return Ok(None);
    };
    let parts = (len - first).div_ceil(sizes.part);
    if threads < 2 || parts < 4 {
        return Ok(None);
    }
    let layout = Layout {
        first,
        parts,
        sizes,
    };
    let shared = Arc::new(Shared {
        layout,
        reached: AtomicU64::new(first * 8),
        cancel: AtomicBool::new(false),
        src,
    });
    let (jobs, taken) = channel::<Job>();
    let taken = Arc::new(Mutex::new(taken));
    let mut r = GzipReader {
        shared,
        waiting: 0,
        jobs: Some(jobs),
        handed: VecDeque::new(),
        workers: Vec::new(),
        by_hand: None,
        ready: None,
        window: Vec::new(),
        crc: crc32fast::Hasher::new(),
        size: 0,
        piece: Vec::new(),
        at: 0,
        after: None,
        failed: None,
        taken: 0,
        by_hand_count: 0,
    };
    for _ in 0..threads.min(parts as usize) {
        let (taken, shared) = (taken.clone(), r.shared.clone());
        let spawned = std::thread::Builder::new()
            .name("gzip-chunks".into())
            .spawn(move || work(&taken, &shared));
        match spawned {
            Ok(w) => r.workers.push(w),
            // Fewer workers decode the same parts, only slower (a limit on threads reached).
            Err(_) if !r.workers.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    for _ in 0..r.workers.len() + 2 {
        r.hand_out();
    }
    Ok(Some(r))
}

/// The byte a gzip member's deflate stream starts at (RFC 1952), for a header with no extra
/// field, comment or header CRC; `None` for any other.
fn deflate_start<S: ReadAt + ?Sized>(src: &S) -> io::Result<Option<u64>> {
    const FNAME: u8 = 8;
    let mut head = [0u8; 10];
    if read_at_most(src, 0, &mut head)? < 10 || head[..3] != [0x1f, 0x8b, 8] {
        return Ok(None);
    }
    match head[3] {
        0 => Ok(Some(10)),
        FNAME => {
            // The name ends at a NUL within a page, or the header is left to one core.
            let mut name = [0u8; 4096];
            let n = read_at_most(src, 10, &mut name)?;
            let nul = name[..n].iter().position(|&b| b == 0);
            Ok(nul.map(|i| 10 + i as u64 + 1))
        }
        _ => Ok(None),
    }
}

impl<S: ReadAt + Send + Sync + 'static> GzipReader<S> {
    /// The next part to the workers, if one is left.
    fn hand_out(&mut self) {
        let Some(jobs) = &self.jobs else {
            return;
        };
        if self.waiting >= self.shared.layout.parts {
            return;
        }
        let (tx, rx) = sync_channel(1);
        // Fails only once every worker has gone: the part is then decoded by reading.
        let _ = jobs.send((self.waiting, tx));
        self.handed.push_back((self.waiting, rx));
        self.waiting += 1;
    }

    /// The next piece of output into `self.piece` (perhaps empty).
    fn next_piece(&mut self) -> io::Result<()> {
        if let Some(part) = self.ready.take() {
            return self.take(part);
        }
        if self.by_hand.is_some() {
            return self.step_by_hand();
        }
        let Some((k, rx)) = self.handed.pop_front() else {
            // The last part ends at the stream's end or fails: this is a stream cut short.
            return Err(cut());
        };
        self.hand_out();
        let part = rx.recv().ok().flatten();
        let next = self.shared.layout.next_bit(k);
        let bit = self.shared.reached.load(Ordering::Relaxed);
        match part {
            _ if bit >= next => {}
            Some(part) if part.starts.contains(&bit) => self.take(part)?,
            part => {
                let window: &[u8] = &self.window;
                let lanes = Lanes::start(
                    self.shared.src.clone(),
                    bit,
                    &[window],
                    1 << 20,
                    &mut Vec::new(),
                )?;
                // A part starting at a later block (after a stored or fixed one, which workers
                // do not look for) takes over where this decoding reaches its start.
                let waiting = part.filter(|p| p.starts.start > bit);
                self.by_hand = Some(ByHand {
                    lanes,
                    next,
                    waiting,
                });
                self.by_hand_count += 1;
            }
        }
        Ok(())
    }

    /// A step of the part reading decodes itself.
    fn step_by_hand(&mut self) -> io::Result<()> {
        let Some(hand) = &mut self.by_hand else {
            return Ok(());
        };
        let stop = hand.lanes.step(STEP)?;
        let (bit, end) = (hand.lanes.bit(), hand.lanes.ended(stop, hand.next));
        let out = std::mem::take(&mut hand.lanes.outs[0]);
        hand.waiting = hand.waiting.take().filter(|p| p.starts.end > bit);
        let meets = stop == Stop::BlockEnd
            && hand
                .waiting
                .as_ref()
                .is_some_and(|p| p.starts.contains(&bit));
        self.crc.update(&out);
        self.emit(out);
        if meets {
            self.ready = self.by_hand.take().and_then(|h| h.waiting);
            self.shared.reached.store(bit, Ordering::Relaxed);
        } else if let Some(end) = end {
            self.by_hand = None;
            self.reached(end)?;
        }
        Ok(())
    }

    /// A part that starts where the output so far ends, its window bytes filled in.
    fn take(&mut self, mut part: Part) -> io::Result<()> {
        // Window bytes are sparse in most of a marked stretch: compared 64 at a time first.
        let marked = part.out[..part.marked].chunks_mut(64);
        for (out, high) in marked.zip(part.high.chunks(64)).filter(|(o, h)| o != h) {
            for (b, &high) in out.iter_mut().zip(high) {
                if let Some(p) = window_position(*b, high) {
                    let at = (self.window.len() + p).checked_sub(WINDOW).ok_or_else(|| {
                        invalid("corrupt deflate stream: invalid distance too far back")
                    })?;
                    *b = self.window[at];
                }
            }
        }
        self.crc.update(&part.out[..part.marked]);
        self.crc.combine(&part.tail);
        self.taken += 1;
        let end = part.end;
        self.emit(part.out);
        self.reached(end)
    }

    /// `out` is the next output: into the window, the length and the piece read from.
    fn emit(&mut self, out: Vec<u8>) {
        let keep = WINDOW.saturating_sub(out.len()).min(self.window.len());
        self.window.drain(..self.window.len() - keep);
        self.window
            .extend_from_slice(&out[out.len().saturating_sub(WINDOW)..]);
        self.size += out.len() as u64;
        self.piece = out;
        self.at = 0;
    }

    /// The output has reached `end`: the next part starts there, or the member's trailer does.
    fn reached(&mut self, end: End) -> io::Result<()> {
        let trailer = match end {
            End::Block(bit) => {
                self.shared.reached.store(bit, Ordering::Relaxed);
                return Ok(());
            }
            End::Last(byte) => byte,
        };
        self.stop();
        let mut tail = [0u8; 8];
        let src = &*self.shared.src;
        read_exact_at(src, trailer, &mut tail)?;
        let [c0, c1, c2, c3, s0, s1, s2, s3] = tail;
        if u32::from_le_bytes([c0, c1, c2, c3]) != self.crc.clone().finalize() {
            return Err(invalid(
                "corrupt gzip stream does not have a matching checksum",
            ));
        }
        if u32::from_le_bytes([s0, s1, s2, s3]) != self.size as u32 {
            return Err(invalid(
                "corrupt gzip stream does not have a matching length",
            ));
        }
        let pos = trailer + 8;
        self.after = Some(if pos >= src.len()? {
            Box::new(io::empty())
        } else {
            let rest = Rest {
                src: self.shared.src.clone(),
                pos,
            };
            let more = BufReader::with_capacity(1 << 20, rest);
            Box::new(flate2::read::MultiGzDecoder::new(more))
        });
        Ok(())
    }

    /// Reading stops at `e`: later reads return it again, and the workers end.
    fn fail(&mut self, e: io::Error) -> io::Error {
        self.failed = Some((e.kind(), e.to_string()));
        self.stop();
        e
    }

    fn stop(&mut self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
        self.jobs = None;
        self.handed.clear();
    }
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// The span's bytes from `pos` to its end, as a stream: the members after the first.
struct Rest<S: ?Sized> {
    src: Arc<S>,
    pos: u64,
}

impl<S: ReadAt + ?Sized> Read for Rest<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.src.read_at(self.pos, buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<S: ReadAt + Send + Sync + 'static> Read for GzipReader<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.piece.len() {
            if let Some((kind, why)) = &self.failed {
                return Err(io::Error::new(*kind, why.clone()));
            }
            if let Some(after) = &mut self.after {
                return after.read(buf);
            }
            if let Err(e) = self.next_piece() {
                return Err(self.fail(e));
            }
        }
        let n = buf.len().min(self.piece.len() - self.at);
        buf[..n].copy_from_slice(&self.piece[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl<S: ReadAt + Send + Sync + 'static> Drop for GzipReader<S> {
    /// The workers end: those waiting for a part at once, one decoding at its next step.
    fn drop(&mut self) {
        self.stop();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
