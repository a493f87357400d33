//! One gzip member inflated on many cores by the marker/window method of rapidgzip (Knespel and
//! Brunst, 2023). Workers each find a block start in their part of the deflate stream and decode
//! from it without the 32 KiB of output before it; reading takes the parts in order, fills in
//! the bytes copied from that unknown window in a part's last 32 KiB (the next part's window)
//! and leaves the rest of the fill-in to a worker. Where a part does not start
//! at the block the part before ends at, or failed, reading decodes it itself: the output and
//! the errors are the one-core decoder's.
//!
//! The unknown window needs no decoder of our own: zlib decodes a part twice in step, with two
//! made-up windows whose bytes name their position (its low byte; its high byte, the top bit the
//! low byte's flipped). A byte the two agree on is the data's; any other copies the window
//! position they name. Once 32 KiB in a row hold no window byte, one decoder goes on.
//! Own code rather than rapidgzip-core: its self-timing kept the torch image's layers on one
//! core, and its own marker decoder ran at an eighth of zlib's speed a core.

use std::collections::VecDeque;
use std::io::{self, BufReader, Read};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

use super::read_at::{read_at_most, read_exact_at, ByteStream, ReadAt};
use super::zlib_raw::{RawInflate, Stop};

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

impl Sizes {
    /// For a stream of `len` bytes on `threads` cores: four parts a thread, each 256 KiB to
    /// 4 MiB (smaller ones spend more of their time finding a start and on the made-up windows).
    pub(super) fn for_stream(len: u64, threads: usize) -> Sizes {
        let share = len / (threads as u64 * 4).max(1);
        Sizes {
            part: share.clamp(256 << 10, 4 << 20),
            max_out: 32 << 20,
        }
    }
}

/// Where a decoded run of the stream ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// At the end of a block, at or past the next part's start: that bit of the span.
    Block(u64),
    /// At the end of the last block; the member's trailer starts at this byte.
    Last(u64),
}

/// A span's bytes from a position on, read a buffer's length at a time.
struct Input<S: ?Sized> {
    src: Arc<S>,
    /// The span offset of `buf[0]`.
    pos: u64,
    /// Allocated once: `buf[..len]` holds the bytes read, `buf[at..len]` those not consumed.
    buf: Vec<u8>,
    len: usize,
    at: usize,
}

impl<S: ReadAt + ?Sized> Input<S> {
    /// The bytes not consumed yet, read on when none are left; empty at the span's end.
    fn bytes(&mut self) -> io::Result<&[u8]> {
        if self.at == self.len {
            self.pos += self.len as u64;
            self.at = 0;
            self.len = 0;
            self.len = self.src.read_at(self.pos, &mut self.buf)?;
        }
        Ok(&self.buf[self.at..self.len])
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
            buf: vec![0; piece],
            len: 0,
            at: 0,
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

impl Part {
    /// The CRC-32 of its output, its window bytes filled in.
    fn crc(&self) -> crc32fast::Hasher {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&self.out[..self.marked]);
        crc.combine(&self.tail);
        crc
    }
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
            return Err(stopped());
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
/// stream's end, or a MiB) without an error; and the bytes it decoded on the way, the trial's
/// cost. `spare`: a decoder to use and give back.
fn decodes_from<S: ReadAt + ?Sized>(
    src: &Arc<S>,
    bit: u64,
    spare: &mut Vec<RawInflate>,
) -> (bool, usize) {
    static ZEROS: [u8; WINDOW] = [0; WINDOW];
    let Ok(mut lanes) = Lanes::start(src.clone(), bit, &[&ZEROS], 16 << 10, spare) else {
        return (false, 0);
    };
    let (mut ends, mut wrote) = (0, 0);
    let decodes = loop {
        if wrote >= 4 * STEP {
            break true;
        }
        let step = lanes.step(STEP);
        wrote += lanes.outs[0].len();
        lanes.outs[0].clear();
        match step {
            Ok(Stop::StreamEnd) => break true,
            Ok(Stop::BlockEnd) if ends == 1 => break true,
            Ok(Stop::BlockEnd) => ends += 1,
            Ok(Stop::Midway) => {}
            Err(_) => break false,
        }
    };
    spare.append(&mut lanes.zs);
    (decodes, wrote)
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

/// The first block start in part `k` that zlib decodes from: the bits that all start it (one, or
/// the zero bits before a stored block's padding). `None` where there is none, where reading
/// stops or passes the part, or where the trials have decoded as much as a part may hold (a
/// stream made to look like block starts everywhere): reading decodes the part then.
fn find_start<S: ReadAt + ?Sized>(shared: &Shared<S>, k: u64) -> io::Result<Option<Range<u64>>> {
    let layout = &shared.layout;
    let (from, to, next) = (
        layout.first_byte(k),
        layout.first_byte(k + 1),
        layout.next_bit(k),
    );
    let gone =
        || shared.cancel.load(Ordering::Relaxed) || shared.reached.load(Ordering::Relaxed) >= next;
    let mut budget = layout.sizes.max_out;
    let mut buf = vec![0u8; (64 << 10) + 16];
    let mut spare = Vec::new();
    let mut at = from;
    while at < to {
        let n = read_at_most(&*shared.src, at, &mut buf)?;
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
                if gone() {
                    return Ok(None);
                }
                let (decodes, cost) = decodes_from(&shared.src, bits.start, &mut spare);
                if decodes {
                    return Ok(Some(bits));
                }
                let Some(left) = budget.checked_sub(cost) else {
                    return Ok(None);
                };
                budget = left;
            }
        }
        at += scan as u64;
    }
    Ok(None)
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

/// What a worker does: decode part `k` without its window, or fill in a part's window bytes.
enum Job {
    Decode(u64, SyncSender<Option<Part>>),
    Fill(Fill),
}

/// The workers' jobs: fill-ins ahead of decoding (reading waits on them), each kind in order.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    more: Condvar,
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<Job>,
    /// Whether reading has stopped handing out more, or every worker has gone.
    closed: bool,
    workers: usize,
}

impl Queue {
    /// `job` queued; given back once the queue is closed (a job dropped instead tells whoever
    /// waits on it through its channel).
    fn push(&self, job: Job) -> Option<Job> {
        let mut q = crate::lock(&self.state);
        if q.closed {
            return Some(job);
        }
        let at = match job {
            Job::Fill(_) => q
                .jobs
                .iter()
                .take_while(|j| matches!(j, Job::Fill(_)))
                .count(),
            Job::Decode(..) => q.jobs.len(),
        };
        q.jobs.insert(at, job);
        self.more.notify_one();
        None
    }

    /// The next job; `None` once the queue is closed and empty.
    fn pop(&self) -> Option<Job> {
        let mut q = crate::lock(&self.state);
        loop {
            if let Some(job) = q.jobs.pop_front() {
                return Some(job);
            }
            if q.closed {
                return None;
            }
            q = self.more.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// No more jobs: those not started are dropped, but for the fill-ins where `keep_fills`.
    fn close(&self, keep_fills: bool) {
        let mut q = crate::lock(&self.state);
        q.jobs.retain(|j| keep_fills && matches!(j, Job::Fill(_)));
        q.closed = true;
        self.more.notify_all();
    }

    fn joined(&self) {
        crate::lock(&self.state).workers += 1;
    }

    /// A worker has gone (at the end, or in a panic): after the last, nothing is left queued
    /// for none to take.
    fn left(&self) {
        let last = {
            let mut q = crate::lock(&self.state);
            q.workers -= 1;
            q.workers == 0
        };
        if last {
            self.close(false);
        }
    }
}

/// A worker: jobs until reading stops. A part it cannot start or decode is `None`: reading
/// decodes it and meets the error, if the stream has one there.
fn work<S: ReadAt + ?Sized>(queue: &Queue, shared: &Shared<S>) {
    struct Leaving<'a>(&'a Queue);
    impl Drop for Leaving<'_> {
        fn drop(&mut self) {
            self.0.left();
        }
    }
    let _leaving = Leaving(queue);
    while let Some(job) = queue.pop() {
        match job {
            Job::Decode(k, tx) => {
                let _ = tx.send(blind_part(shared, k));
            }
            Job::Fill(fill) => fill.run(),
        }
    }
}

/// A part's output with its CRC-32.
type Filled = (Vec<u8>, crc32fast::Hasher);

/// A taken part's window bytes before `upto` (those after, reading filled in itself), filled in
/// from `window`, the output before the part.
struct Fill {
    part: Part,
    upto: usize,
    window: Arc<Vec<u8>>,
    done: SyncSender<io::Result<Filled>>,
}

impl Fill {
    fn run(self) {
        let Fill {
            mut part,
            upto,
            window,
            done,
        } = self;
        let filled = fill_in(&mut part.out[..upto], &part.high[..upto], &window);
        let _ = done.send(filled.map(|()| {
            let crc = part.crc();
            (part.out, crc)
        }));
    }
}

/// The bytes of `out` that copy a window position (`high`: the second decoder's bytes at the
/// same places) replaced by that position's byte in `window`, the 32 KiB of output before the
/// part (less at the stream's start).
fn fill_in(out: &mut [u8], high: &[u8], window: &[u8]) -> io::Result<()> {
    // Window bytes are sparse in most of a marked stretch: compared 64 at a time first.
    for (out, high) in out
        .chunks_mut(64)
        .zip(high.chunks(64))
        .filter(|(o, h)| o != h)
    {
        for (b, &high) in out.iter_mut().zip(high) {
            if let Some(p) = window_position(*b, high) {
                let at = (window.len() + p).checked_sub(WINDOW).ok_or_else(|| {
                    invalid("corrupt deflate stream: invalid distance too far back")
                })?;
                *b = window[at];
            }
        }
    }
    Ok(())
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
        _ => find_start(shared, k).ok()??,
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
    queue: Arc<Queue>,
    /// Whether parts are still handed out: not once the member's end is known, or reading failed.
    handing: bool,
    /// Parts handed out, in order: each a channel, and what came down it once looked at.
    handed: VecDeque<Handed>,
    workers: Vec<JoinHandle<()>>,
    by_hand: Option<ByHand<S>>,
    /// A part that starts where the output so far ends.
    ready: Option<Part>,
    /// The output taken but not read yet, in order (its window bytes filled in on the workers).
    ahead: VecDeque<Ahead>,
    /// Whether the member's end (or an error) is in `ahead`: nothing is taken after it.
    ended: bool,
    /// The last 32 KiB and the length of the output taken; the CRC-32 of the output read.
    window: Vec<u8>,
    size: u64,
    crc: crc32fast::Hasher,
    piece: Vec<u8>,
    at: usize,
    /// The members after the first, once it has ended.
    after: Option<Box<dyn Read + Send>>,
    failed: Option<(io::ErrorKind, String)>,
    /// Parts taken from the workers, and decoded by reading.
    pub(super) taken: u64,
    pub(super) by_hand_count: u64,
}

/// Part `k` handed out: where it comes, and what came (`Some(None)`: no part).
type Handed = (u64, Receiver<Option<Part>>, Option<Option<Part>>);

/// The output taken, before it is read.
enum Ahead {
    /// Bytes, with their CRC-32.
    Out(Filled),
    /// A part a worker fills in.
    Filling(Receiver<io::Result<Filled>>),
    /// The member's trailer at this byte, checked once all its output is read.
    Trailer(u64),
    Failed(io::Error),
}

/// Output taken ahead of reading: while reading returns one part, workers fill in the next.
const AHEAD: usize = 4;

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
    let mut r = GzipReader {
        shared,
        waiting: 0,
        queue: Arc::default(),
        handing: true,
        handed: VecDeque::new(),
        workers: Vec::new(),
        by_hand: None,
        ready: None,
        ahead: VecDeque::new(),
        ended: false,
        window: Vec::new(),
        size: 0,
        crc: crc32fast::Hasher::new(),
        piece: Vec::new(),
        at: 0,
        after: None,
        failed: None,
        taken: 0,
        by_hand_count: 0,
    };
    for _ in 0..threads.min(parts as usize) {
        let (queue, shared) = (r.queue.clone(), r.shared.clone());
        r.queue.joined();
        let spawned = std::thread::Builder::new()
            .name("gzip-chunks".into())
            .spawn(move || work(&queue, &shared));
        if spawned.is_err() {
            r.queue.left();
        }
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
        if !self.handing || self.waiting >= self.shared.layout.parts {
            return;
        }
        let (tx, rx) = sync_channel(1);
        // Refused only once every worker has gone: the part is then decoded by reading.
        let _ = self.queue.push(Job::Decode(self.waiting, tx));
        self.handed.push_back((self.waiting, rx, None));
        self.waiting += 1;
    }

    /// The next piece of output into `self.piece` (perhaps empty), output taken ahead first.
    fn next_piece(&mut self) -> io::Result<()> {
        // Ahead only as far as that waits for nothing: a part not decoded yet may wait for
        // bytes still to arrive.
        while !self.ended
            && (self.ahead.is_empty() || self.ahead.len() < AHEAD && self.next_is_in())
        {
            if let Err(e) = self.advance() {
                self.ahead.push_back(Ahead::Failed(e));
                self.ended = true;
                self.stop(true);
            }
        }
        let (out, crc) = match self.ahead.pop_front() {
            Some(Ahead::Out(filled)) => filled,
            Some(Ahead::Filling(rx)) => rx.recv().unwrap_or_else(|_| Err(stopped()))?,
            Some(Ahead::Trailer(at)) => return self.trailer(at),
            Some(Ahead::Failed(e)) => return Err(e),
            None => return Err(stopped()),
        };
        self.crc.combine(&crc);
        self.piece = out;
        self.at = 0;
        Ok(())
    }

    /// Whether the next output can be taken without waiting: from a part decoded already.
    fn next_is_in(&mut self) -> bool {
        if self.ready.is_some() {
            return true;
        }
        match self.handed.front_mut() {
            Some((_, rx, came)) if self.by_hand.is_none() => {
                if came.is_none() {
                    *came = match rx.try_recv() {
                        Ok(part) => Some(part),
                        Err(TryRecvError::Disconnected) => Some(None),
                        Err(TryRecvError::Empty) => None,
                    };
                }
                came.is_some()
            }
            _ => false,
        }
    }

    /// The next output taken: from a part, or from decoding by hand.
    fn advance(&mut self) -> io::Result<()> {
        if let Some(part) = self.ready.take() {
            return self.take(part);
        }
        if self.by_hand.is_some() {
            return self.step_by_hand();
        }
        let Some((k, rx, came)) = self.handed.pop_front() else {
            // The last part ends at the stream's end or fails: this is a stream cut short.
            return Err(cut());
        };
        self.hand_out();
        let part = came.unwrap_or_else(|| rx.recv().ok().flatten());
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
        self.keep(out, None);
        if meets {
            self.ready = self.by_hand.take().and_then(|h| h.waiting);
            self.shared.reached.store(bit, Ordering::Relaxed);
        } else if let Some(end) = end {
            self.by_hand = None;
            self.reached(end)?;
        }
        Ok(())
    }

    /// A part that starts where the output so far ends: its window bytes filled in by a worker,
    /// but for those in its last 32 KiB, the next part's window, filled in here.
    fn take(&mut self, mut part: Part) -> io::Result<()> {
        let upto = part.out.len().saturating_sub(WINDOW).min(part.marked);
        let marked = upto..part.marked;
        fill_in(
            &mut part.out[marked.clone()],
            &part.high[marked],
            &self.window,
        )?;
        self.taken += 1;
        let end = part.end;
        if upto == 0 {
            let crc = part.crc();
            self.keep(part.out, Some(crc));
        } else {
            let window = Arc::new(self.window.clone());
            self.keep_window(&part.out);
            let (done, filling) = sync_channel(1);
            let fill = Job::Fill(Fill {
                part,
                upto,
                window,
                done,
            });
            // With every worker gone, reading fills it in itself.
            if let Some(Job::Fill(fill)) = self.queue.push(fill) {
                fill.run();
            }
            self.ahead.push_back(Ahead::Filling(filling));
        }
        self.reached(end)
    }

    /// `out` is the next output (`crc` its CRC-32, if known), to be read after what is ahead.
    fn keep(&mut self, out: Vec<u8>, crc: Option<crc32fast::Hasher>) {
        self.keep_window(&out);
        let crc = crc.unwrap_or_else(|| {
            let mut crc = crc32fast::Hasher::new();
            crc.update(&out);
            crc
        });
        self.ahead.push_back(Ahead::Out((out, crc)));
    }

    /// The window and length of the output taken, `out` after it.
    fn keep_window(&mut self, out: &[u8]) {
        let keep = WINDOW.saturating_sub(out.len()).min(self.window.len());
        self.window.drain(..self.window.len() - keep);
        self.window
            .extend_from_slice(&out[out.len().saturating_sub(WINDOW)..]);
        self.size += out.len() as u64;
    }

    /// The output has reached `end`: the next part starts there, or the member's trailer does.
    fn reached(&mut self, end: End) -> io::Result<()> {
        match end {
            End::Block(bit) => self.shared.reached.store(bit, Ordering::Relaxed),
            End::Last(byte) => {
                self.ahead.push_back(Ahead::Trailer(byte));
                self.ended = true;
                self.stop(true);
            }
        }
        Ok(())
    }

    /// The member's trailer at byte `at`, all its output read: its CRC-32 and length checked,
    /// and the members after it to be read on.
    fn trailer(&mut self, at: u64) -> io::Result<()> {
        let mut tail = [0u8; 8];
        let src = &*self.shared.src;
        read_exact_at(src, at, &mut tail)?;
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
        let pos = at + 8;
        self.after = Some(if pos >= src.len()? {
            Box::new(io::empty())
        } else {
            let rest = ByteStream {
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
        self.stop(false);
        e
    }

    /// No more parts are decoded; the fill-ins under way are finished where `keep_fills`.
    fn stop(&mut self, keep_fills: bool) {
        self.shared.cancel.store(true, Ordering::Relaxed);
        self.handing = false;
        self.queue.close(keep_fills);
        self.handed.clear();
    }
}

fn stopped() -> io::Error {
    io::Error::other("inflating stopped")
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
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
        self.stop(false);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::inflate::tests::{
        flate2_gz, noise, sequential, system_gz, text, words, Rng, TEST_SIZES,
    };
    use std::time::{Duration, Instant};

    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;

    /// A deflate stream's bits, least significant first.
    #[derive(Default)]
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }

    impl Bits {
        fn put(&mut self, v: u64, n: u32) {
            self.acc |= (v & ((1u64 << n) - 1)) << self.n;
            self.n += n;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }

        /// A Huffman code: its most significant bit goes first.
        fn code(&mut self, (code, len): (u32, u8)) {
            assert!(len > 0, "a symbol without a code");
            self.put(
                u64::from(code.reverse_bits() >> (32 - u32::from(len))),
                len.into(),
            );
        }

        /// To the byte's end with `v`'s low bits (a decoder skips them).
        fn pad(&mut self, v: u8) {
            if self.n > 0 {
                self.put(v.into(), 8 - self.n);
            }
        }

        fn finish(mut self) -> Vec<u8> {
            self.pad(0);
            self.out
        }
    }

    /// The canonical Huffman codes of `lens` (RFC 1951 3.2.2).
    fn canonical(lens: &[u8]) -> Vec<(u32, u8)> {
        let mut count = [0u32; 16];
        lens.iter().for_each(|&l| count[l as usize] += 1);
        count[0] = 0;
        let (mut next, mut code) = ([0u32; 16], 0);
        for b in 1..16 {
            code = (code + count[b - 1]) << 1;
            next[b] = code;
        }
        let mut code_of = |l: u8| match l {
            0 => (0, 0),
            _ => {
                next[l as usize] += 1;
                (next[l as usize] - 1, l)
            }
        };
        lens.iter().map(|&l| code_of(l)).collect()
    }

    #[derive(Clone, Copy, Debug)]
    enum Sym {
        Lit(u8),
        /// Length, distance.
        Copy(u16, u16),
    }

    const LEN_BASE: [u16; 29] = [
        3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115,
        131, 163, 195, 227, 258,
    ];
    const LEN_EXTRA: [u32; 29] = [
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
    ];
    const DIST_BASE: [u16; 30] = [
        1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
        2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
    ];
    const DIST_EXTRA: [u32; 30] = [
        0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12,
        13, 13,
    ];

    fn len_code(len: u16) -> usize {
        LEN_BASE
            .iter()
            .rposition(|&b| b <= len)
            .expect("a length of 3 or more")
    }

    fn dist_code(d: u16) -> usize {
        DIST_BASE
            .iter()
            .rposition(|&b| b <= d)
            .expect("a distance of 1 or more")
    }

    enum Block {
        /// The padding after the header is `pad`'s low bits.
        Stored(Vec<u8>, u8),
        Fixed(Vec<Sym>),
        /// Symbols, and the code lengths of the literal/length and distance codes.
        Dynamic(Vec<Sym>, Vec<u8>, Vec<u8>),
    }

    fn fixed_lengths() -> (Vec<u8>, Vec<u8>) {
        let lit = [(144, 8), (112, 9), (24, 7), (8, 8)];
        let lit = lit.iter().flat_map(|&(n, l)| std::iter::repeat_n(l, n));
        (lit.collect(), vec![5; 30])
    }

    fn write_syms(w: &mut Bits, syms: &[Sym], lit: &[u8], dist: &[u8]) {
        let (lit, dist) = (canonical(lit), canonical(dist));
        for s in syms {
            match *s {
                Sym::Lit(b) => w.code(lit[b as usize]),
                Sym::Copy(len, d) => {
                    let i = len_code(len);
                    w.code(lit[257 + i]);
                    w.put((len - LEN_BASE[i]).into(), LEN_EXTRA[i]);
                    let j = dist_code(d);
                    w.code(dist[j]);
                    w.put((d - DIST_BASE[j]).into(), DIST_EXTRA[j]);
                }
            }
        }
        w.code(lit[256]);
    }

    /// A dynamic block's header: all 19 code-length codes, 4 or 5 bits, no runs.
    fn write_header(w: &mut Bits, lit: &[u8], dist: &[u8]) {
        const ORDER: [usize; 19] = [
            16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
        ];
        w.put((lit.len() - 257) as u64, 5);
        w.put((dist.len() - 1) as u64, 5);
        w.put(15, 4);
        let cl: Vec<u8> = (0..19).map(|s| if s <= 12 { 4 } else { 5 }).collect();
        ORDER.iter().for_each(|&s| w.put(cl[s].into(), 3));
        let codes = canonical(&cl);
        lit.iter()
            .chain(dist)
            .for_each(|&l| w.code(codes[l as usize]));
    }

    fn write_block(w: &mut Bits, block: &Block, last: bool) {
        w.put(last.into(), 1);
        match block {
            Block::Stored(data, pad) => {
                w.put(0, 2);
                w.pad(*pad);
                w.put(data.len() as u64, 16);
                w.put(u64::from(!(data.len() as u16)), 16);
                assert_eq!(w.n, 0);
                w.out.extend_from_slice(data);
            }
            Block::Fixed(syms) => {
                w.put(1, 2);
                let (lit, dist) = fixed_lengths();
                write_syms(w, syms, &lit, &dist);
            }
            Block::Dynamic(syms, lit, dist) => {
                w.put(2, 2);
                write_header(w, lit, dist);
                write_syms(w, syms, lit, dist);
            }
        }
    }

    /// `syms` onto `out`; a copy from before its start copies zeros (the stream is wrong then).
    fn apply(out: &mut Vec<u8>, syms: &[Sym]) {
        for s in syms {
            match *s {
                Sym::Lit(b) => out.push(b),
                Sym::Copy(len, d) => {
                    for _ in 0..len {
                        let b = out.len().checked_sub(d.into()).map_or(0, |i| out[i]);
                        out.push(b);
                    }
                }
            }
        }
    }

    /// A deflate stream built block by block, with the data it decodes to.
    #[derive(Default)]
    struct Stream {
        w: Bits,
        data: Vec<u8>,
    }

    impl Stream {
        fn push(&mut self, block: Block, last: bool) {
            match &block {
                Block::Stored(d, _) => self.data.extend_from_slice(d),
                Block::Fixed(s) | Block::Dynamic(s, ..) => apply(&mut self.data, s),
            }
            write_block(&mut self.w, &block, last);
        }

        fn len(&self) -> usize {
            self.w.out.len()
        }

        /// As a gzip member: a plain header, the stream, its CRC-32 and length.
        fn gzip(self) -> Vec<u8> {
            let mut g = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
            g.extend_from_slice(&self.w.finish());
            g.extend_from_slice(&crc32fast::hash(&self.data).to_le_bytes());
            g.extend_from_slice(&(self.data.len() as u32).to_le_bytes());
            g
        }
    }

    /// Code lengths of a random complete code (at most 15 bits) for the `used` symbols of `n`,
    /// at least two.
    fn random_lengths(rng: &mut Rng, n: usize, used: &[usize]) -> Vec<u8> {
        let mut syms: Vec<usize> = used.to_vec();
        syms.sort_unstable();
        syms.dedup();
        while syms.len() < 2 {
            let s = rng.below(n);
            if !syms.contains(&s) {
                syms.push(s);
            }
        }
        let mut depths = vec![0u8];
        while depths.len() < syms.len() {
            let i = rng.below(depths.len());
            if depths[i] < 15 {
                depths[i] += 1;
                depths.push(depths[i]);
            }
        }
        let mut lens = vec![0u8; n];
        for i in (1..syms.len()).rev() {
            syms.swap(i, rng.below(i + 1));
        }
        syms.iter().zip(depths).for_each(|(&s, d)| lens[s] = d);
        lens
    }

    /// A dynamic block of `syms` with a random code for the symbols they use.
    fn dynamic(rng: &mut Rng, syms: Vec<Sym>) -> Block {
        let mut lit = vec![256];
        let mut dist = Vec::new();
        for s in &syms {
            match *s {
                Sym::Lit(b) => lit.push(b as usize),
                Sym::Copy(len, d) => {
                    lit.push(257 + len_code(len));
                    dist.push(dist_code(d));
                }
            }
        }
        let lit = random_lengths(rng, 286, &lit);
        let dist = random_lengths(rng, 30, &dist);
        Block::Dynamic(syms, lit, dist)
    }

    /// `n` random symbols after `before` bytes of output, every copy from within it: lengths
    /// of all sizes, distances short, long and at the window's end.
    fn random_syms(rng: &mut Rng, before: &mut Vec<u8>, n: usize) -> Vec<Sym> {
        let mut syms = Vec::with_capacity(n);
        for _ in 0..n {
            let have = before.len().min(WINDOW);
            let s = if have >= 1 && rng.below(3) > 0 {
                let len = match rng.below(4) {
                    0 => 258,
                    _ => 3 + rng.below(256),
                } as u16;
                let d = match rng.below(4) {
                    0 => have,
                    1 => 1 + rng.below(have.min(64)),
                    _ => 1 + rng.below(have),
                } as u16;
                Sym::Copy(len, d)
            } else {
                Sym::Lit(b'a' + rng.below(26) as u8)
            };
            apply(before, &[s]);
            syms.push(s);
        }
        syms
    }

    /// The stream in `threads` parts of `sizes`, read to its end; the parts workers decoded.
    fn chunked(blob: &[u8], threads: usize, sizes: Sizes) -> (io::Result<Vec<u8>>, u64) {
        match start(Arc::new(blob.to_vec()), threads, sizes) {
            Ok(Some(mut r)) => {
                let mut out = Vec::new();
                let read = r.read_to_end(&mut out).map(|_| out);
                (read, r.taken)
            }
            Ok(None) => panic!("the stream went to one core"),
            Err(e) => (Err(e), 0),
        }
    }

    /// The parallel inflate's outcome is flate2's: the same bytes, or an error of the same kind
    /// (a stream cut short, or any other).
    fn assert_as_one_core(name: &str, blob: &[u8]) -> u64 {
        let one = sequential(blob);
        let (many, taken) = chunked(blob, 2, TEST_SIZES);
        match (&one, &many) {
            (Ok(a), Ok(b)) => assert!(a == b, "{name}: the output differs"),
            (Err(a), Err(b)) => {
                let cut = |e: &io::Error| e.kind() == io::ErrorKind::UnexpectedEof;
                assert_eq!(cut(a), cut(b), "{name}: flate2 says {a}, the parts {b}");
            }
            (Ok(_), Err(e)) => panic!("{name}: flate2 takes it, the parts fail: {e}"),
            (Err(e), Ok(_)) => panic!("{name}: flate2 fails ({e}), the parts take it"),
        }
        taken
    }

    /// `n` empty fixed blocks: 10 bits of stream each, no output, no start a worker looks for.
    fn empty_blocks(s: &mut Stream, n: usize) {
        (0..n).for_each(|_| s.push(Block::Fixed(Vec::new()), false));
    }

    // Guards the by-hand stitching, the stored-block start ranges and the window fill-in
    // against every mix of stored (padding zero or not), fixed and dynamic blocks of any size,
    // copies at the window's far end included, and a second member or not.
    #[test]
    fn random_block_streams_are_byte_equal_to_one_core() {
        let seed = crate::image::inflate::tests::seed();
        let mut rng = Rng(seed | 1);
        let mut taken = 0;
        for case in 0..6 {
            let mut s = Stream::default();
            let target = 200 * KIB + rng.below(300 * KIB);
            while s.len() < target {
                let block = match rng.below(5) {
                    0 => {
                        let len = [0, 1 + rng.below(300), rng.below(65536)][rng.below(3)];
                        let pad = [0, rng.next() as u8][rng.below(2)];
                        Block::Stored(noise(len, rng.next()), pad)
                    }
                    1 => {
                        let n = rng.below(8000);
                        Block::Fixed(random_syms(&mut rng, &mut s.data.clone(), n))
                    }
                    _ => {
                        let n = [0, rng.below(100), rng.below(40000)][rng.below(3)];
                        let syms = random_syms(&mut rng, &mut s.data.clone(), n);
                        dynamic(&mut rng, syms)
                    }
                };
                s.push(block, false);
            }
            let syms = random_syms(&mut rng, &mut s.data.clone(), 100);
            s.push(Block::Fixed(syms), true);
            let data = s.data.clone();
            let mut blob = s.gzip();
            assert!(
                sequential(&blob).unwrap() == data,
                "case {case}: a wrong test stream"
            );
            if rng.below(3) == 0 {
                blob.extend_from_slice(&flate2_gz(&text(100 * KIB, case), 6));
            }
            taken += assert_as_one_core(&format!("seed {seed} case {case}"), &blob);
        }
        assert!(taken > 0, "the workers decoded no part");
    }

    // Guards the fill-in of window bytes: a copy from before the stream's start, in a part a
    // worker decodes after parts with almost no output, fails as flate2's "invalid distance too
    // far back" does; one from the stream's very first byte on is taken.
    #[test]
    fn a_copy_from_before_the_start_fails_in_any_part() {
        for (name, lead, dist) in [
            ("in part 0", 0, 101),
            ("in part 0, at the first byte", 0, 100),
            ("in part 2", 120_000, 101),
            ("in part 2, at the first byte", 120_000, 100),
            ("in part 2, a window from part 0", 120_000, 32768),
        ] {
            let mut s = Stream::default();
            empty_blocks(&mut s, lead / 2);
            let first = match dist {
                32768 => noise(40_000, 7),
                _ => noise(100, 7),
            };
            s.push(Block::Stored(first, 0), false);
            empty_blocks(&mut s, lead / 2);
            let mut rng = Rng(3);
            let syms = vec![Sym::Copy(258, dist), Sym::Lit(2)];
            s.push(dynamic(&mut rng, syms), false);
            s.push(Block::Stored(noise(60_000, 8), 0), false);
            s.push(Block::Stored(noise(60_000, 9), 0), false);
            s.push(Block::Stored(noise(60_000, 10), 0), false);
            s.push(Block::Stored(noise(60_000, 11), 0), true);
            let blob = s.gzip();
            // The copy is 1 byte past the output before it where the name says so.
            let far = !name.contains("first byte") && dist != 32768;
            assert_eq!(sequential(&blob).is_err(), far, "{name}: flate2");
            assert_as_one_core(name, &blob);
        }
    }

    /// The length of a stored block, pushed next, that ends at byte `end` of the stream (its
    /// header, padding and lengths take 5 bytes from a byte's start).
    fn stored_len_to(s: &Stream, end: usize) -> usize {
        end - (s.len() + 5)
    }

    // Guards where a part ends: a block end a byte or a few bits before, at, or after the
    // next part's first bit, and a stored block at each bit of its byte with zero or other
    // padding, so that reading meets the next worker's start anywhere in its range of bits.
    #[test]
    fn block_ends_at_and_around_a_part_boundary() {
        let mut taken = 0;
        for delta in -4i64..=4 {
            for lits in 0..8usize {
                for pad in [0, 0xff] {
                    let mut s = Stream::default();
                    // The first part: to `delta` bytes from where the second starts (10 header
                    // bytes before the stream), less the fixed block after it.
                    let boundary = (TEST_SIZES.part as i64 + delta) as usize;
                    let fixed = (3 + 9 * lits + 7).div_ceil(8);
                    let len = stored_len_to(&s, boundary - fixed.min(boundary));
                    s.push(Block::Stored(noise(len, 1), 0), false);
                    // Literals of 9 bits: the fixed block ends at every bit of a byte.
                    let syms = (0..lits).map(|i| Sym::Lit(200 + i as u8)).collect();
                    s.push(Block::Fixed(syms), false);
                    s.push(Block::Stored(noise(100, 2), pad), false);
                    for i in 0..5 {
                        s.push(Block::Stored(noise(65535, 3 + i), pad), false);
                    }
                    s.push(Block::Fixed(vec![Sym::Lit(1)]), true);
                    let name = format!("{delta} bytes, {lits} literals, padding {pad:#x}");
                    taken += assert_as_one_core(&name, &s.gzip());
                }
            }
        }
        assert!(taken > 100, "the workers' parts were taken {taken} times");
    }

    /// A member of stored blocks, its last block ending about `at` bytes in.
    fn stored_member(at: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
        let mut s = Stream::default();
        while s.len() + 65540 < at {
            s.push(Block::Stored(noise(65535, seed + s.len() as u64), 0), false);
        }
        let mut rng = Rng(seed | 1);
        let syms = random_syms(&mut rng, &mut s.data.clone(), 5000);
        s.push(dynamic(&mut rng, syms), true);
        let data = s.data.clone();
        (s.gzip(), data)
    }

    // Guards the member's end: a last block inside an early part with the parts after it
    // covering a trailer gone wrong, garbage, a bit of a header, zeros, a raw deflate stream
    // (starts the workers find and decode) or a second member; and a trailer cut short.
    #[test]
    fn what_follows_the_last_block_is_read_as_flate2_reads_it() {
        let (short, _) = stored_member(100 * KIB, 1);
        let n = short.len();
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
        io::Write::write_all(&mut raw, &text(2 * MIB, 2)).unwrap();
        let raw = raw.finish().unwrap();
        let bad_crc = {
            let mut b = short.clone();
            b[n - 8] ^= 1;
            b
        };
        let bad_size = {
            let mut b = short.clone();
            b[n - 1] ^= 0x80;
            b
        };
        let tails: [(&str, Vec<u8>); 8] = [
            ("noise", noise(300 * KIB, 3)),
            ("a byte of a header", vec![0x1f]),
            ("the magic alone", vec![0x1f, 0x8b]),
            ("zeros", vec![0; 300 * KIB]),
            ("a raw deflate stream", raw),
            ("a second member", system_gz(&words(4 * MIB, 4), 6)),
            (
                "a cut second member",
                system_gz(&words(4 * MIB, 4), 6)[..200 * KIB].to_vec(),
            ),
            ("nothing", Vec::new()),
        ];
        for (name, tail) in &tails {
            for (head, member) in [("", &short), ("CRC ", &bad_crc), ("size ", &bad_size)] {
                let blob = [member.as_slice(), tail].concat();
                if blob.len() >= 4 * TEST_SIZES.part as usize {
                    assert_as_one_core(&format!("{head}{name}"), &blob);
                }
            }
        }
        let (long, _) = stored_member(400 * KIB, 5);
        for cut in [1, 4, 7, 8] {
            let blob = &long[..long.len() - cut];
            assert!(sequential(blob).is_err());
            assert_as_one_core(&format!("trailer cut by {cut}"), blob);
        }
    }

    // Guards against taking a false start: stored blocks (gzip -0) whose bytes are themselves
    // deflate streams, so that workers find starts in them that decode cleanly to their ends.
    #[test]
    fn deflate_streams_inside_stored_blocks_are_data() {
        let inner: Vec<u8> = (0..6)
            .flat_map(|i| {
                let gz = system_gz(&text(MIB, 20 + i), 1 + 4 * (i as u32 % 3));
                gz[10..gz.len() - 8].to_vec()
            })
            .collect();
        for level in [0, 1] {
            let blob = flate2_gz(&inner, level);
            assert_as_one_core(&format!("level {level}"), &blob);
        }
    }

    // Guards the window's hand-off between the made-up windows' decoders: copies at the full
    // distance chain window bytes through a whole part, and a copy at 32768 lands on the
    // first byte after 32 KiB without any window byte.
    #[test]
    fn window_bytes_copied_on_through_whole_parts() {
        let mut rng = Rng(11);
        let mut s = Stream::default();
        s.push(Block::Stored(noise(40_000, 12), 0), false);
        for i in 0..400 {
            let mut syms = Vec::new();
            match i % 4 {
                0 => syms.extend(std::iter::repeat_n(Sym::Copy(258, 32768), 120)),
                1 => syms.extend((0..WINDOW - 1).map(|j| Sym::Lit(j as u8 ^ i as u8))),
                2 => syms.extend([Sym::Copy(3, 32768), Sym::Copy(258, 32767)]),
                _ => syms.extend(random_syms(&mut rng, &mut s.data.clone(), 300)),
            }
            s.push(dynamic(&mut rng, syms), false);
            if s.len() > 600 * KIB {
                break;
            }
        }
        s.push(Block::Fixed(vec![Sym::Copy(258, 32768)]), true);
        let data = s.data.clone();
        let blob = s.gzip();
        assert!(sequential(&blob).unwrap() == data, "a wrong test stream");
        let taken = assert_as_one_core("full-distance copies", &blob);
        assert!(taken > 3, "{taken} parts from the workers");
    }

    /// `blocks` dynamic blocks of 2-bit copies: about 1 KiB of stream and 1 MiB of `a` each.
    fn explosion(blocks: usize) -> Vec<u8> {
        let mut lit = vec![0u8; 286];
        (lit[usize::from(b'a')], lit[256], lit[285]) = (2, 2, 1);
        let mut dist = vec![0u8; 30];
        (dist[0], dist[1]) = (1, 1);
        let mut s = Stream::default();
        for i in 0..blocks {
            let mut syms = vec![Sym::Lit(b'a')];
            syms.extend(std::iter::repeat_n(Sym::Copy(258, 1), 4064));
            let block = Block::Dynamic(syms, lit.clone(), dist.clone());
            write_block(&mut s.w, &block, i + 1 == blocks);
        }
        let n = blocks * (1 + 4064 * 258);
        let mut g = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
        g.extend_from_slice(&s.w.finish());
        g.extend_from_slice(&crc32fast::hash(&vec![b'a'; n]).to_le_bytes());
        g.extend_from_slice(&(n as u32).to_le_bytes());
        g
    }

    /// This process's peak resident set (VmHWM), in bytes.
    fn peak_rss() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib << 10
    }

    // Guards `Sizes::max_out`: a part of 2-bit copies decodes to 64 MiB, a stream of them to
    // 512 MiB; a worker gives up on a part at max_out, and reading streams it, so that the
    // peak memory stays far below the output.
    #[test]
    fn an_output_explosion_stays_in_bounded_memory() {
        let blob = explosion(512);
        let shared = Shared {
            layout: Layout {
                first: 0,
                parts: u64::MAX,
                sizes: TEST_SIZES,
            },
            reached: AtomicU64::new(0),
            cancel: AtomicBool::new(false),
            src: Arc::new(blob.clone()),
        };
        let starts = find_start(&shared, 2)
            .unwrap()
            .expect("a block start in part 2");
        let src = shared.src.clone();
        let part = decode_blind(src, starts, u64::MAX, TEST_SIZES, &shared.cancel);
        assert!(part.is_err(), "a worker decodes past max_out");
        let before = peak_rss();
        let mut r = start(Arc::new(blob), 2, TEST_SIZES).unwrap().unwrap();
        let n = io::copy(&mut r, &mut io::sink()).unwrap();
        assert_eq!(n, 512 * (1 + 4064 * 258));
        let grew = peak_rss().saturating_sub(before);
        assert!(
            grew < 256 << 20,
            "the peak memory grew by {} MiB",
            grew >> 20
        );
    }

    /// A stream whose every read on a worker panics, as a worker's bug would.
    struct PanicsOnWorkers(Vec<u8>);

    impl ReadAt for PanicsOnWorkers {
        fn len(&self) -> io::Result<u64> {
            ReadAt::len(&self.0)
        }

        fn read_at(&self, at: u64, buf: &mut [u8]) -> io::Result<usize> {
            if std::thread::current().name() == Some("gzip-chunks") {
                panic!("a worker's bug");
            }
            self.0.read_at(at, buf)
        }
    }

    // Guards reading against workers that all panic: nothing is left waiting in their queue,
    // and reading decodes every part itself, byte-equal, in bounded time.
    #[test]
    fn workers_that_all_panic_leave_reading_to_decode_alone() {
        let data = text(8 * MIB, 31);
        let blob = system_gz(&data, 6);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let src = Arc::new(PanicsOnWorkers(blob));
            let mut r = start(src, 2, TEST_SIZES).unwrap().unwrap();
            let mut out = Vec::new();
            let _ = tx.send(r.read_to_end(&mut out).map(|_| (out, r.taken)));
        });
        let got = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("reading hangs");
        let (out, taken) = got.unwrap();
        assert!(out == data);
        assert_eq!(taken, 0);
    }

    // Guards the end of the workers: a reader dropped after a few bytes, mid-stream, returns
    // at once, its workers joined.
    #[test]
    fn a_reader_dropped_early_ends_its_workers_at_once() {
        let blob = system_gz(&text(8 * MIB, 30), 6);
        let mut r = start(Arc::new(blob), 2, TEST_SIZES).unwrap().unwrap();
        r.read_exact(&mut [0; 1000]).unwrap();
        drops_at_once(r);
    }

    /// `r` dropped, its workers joined, in well under a second.
    fn drops_at_once<S: ReadAt + 'static>(r: GzipReader<S>) {
        let t = Instant::now();
        drop(r);
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
    }

    /// Stored blocks whose data is records of 5 bytes that each look like a stored block's
    /// header (a zero byte, a length and its complement) whose data ends where a fixed block
    /// starts that copies 955 KB and then fails: every record is a block start the workers
    /// try, at about a megabyte of decoding each. Any decoder reads it as stored data.
    fn false_starts(blocks: usize) -> Vec<u8> {
        let lit = canonical(&fixed_lengths().0);
        let mut w = Bits::default();
        w.put(0b010, 3);
        w.code(lit[usize::from(b'a')]);
        for _ in 0..3700 {
            // Length 258, distance 1.
            w.code(lit[285]);
            w.put(0, 5);
        }
        // Length code 286: no length; zlib fails there.
        w.code((0b1100_0110, 8));
        let target = w.finish();
        let room = 65535 - target.len();
        let mut data = Vec::with_capacity(65535);
        while data.len() + 5 <= room {
            let len = (room - data.len() - 5) as u16;
            // A low byte below 32 would start a stored block of its own that decodes on.
            if len & 0xff < 32 {
                data.push(0xff);
                continue;
            }
            data.push(0);
            data.extend_from_slice(&len.to_le_bytes());
            data.extend_from_slice(&(!len).to_le_bytes());
        }
        data.resize(room, 0xff);
        data.extend_from_slice(&target);
        // The real headers near the parts' ends: the search tries a part's records first.
        let mut s = Stream::default();
        s.push(Block::Stored(noise(65000, 1), 0), false);
        for i in 0..blocks {
            s.push(Block::Stored(data.clone(), 0), i + 1 == blocks);
        }
        s.gzip()
    }

    // Guards the cost of looking for a block start: bytes an encoder may put in any stored
    // block make each part's search decode gigabytes, where flate2 copies the stream through.
    #[test]
    fn false_block_starts_cost_no_more_than_decoding() {
        let blob = false_starts(8);
        let t = Instant::now();
        let want = sequential(&blob).unwrap();
        let one = t.elapsed();
        let t = Instant::now();
        let (got, _) = chunked(&blob, 2, TEST_SIZES);
        let many = t.elapsed();
        assert!(got.unwrap() == want);
        // A bound on the attack, not a speed claim: before the budget it took seconds.
        assert!(
            many < one * 20 + Duration::from_secs(2),
            "{many:?}, flate2 {one:?}"
        );
    }

    // Guards the end of the workers while they look for a block start in such bytes.
    #[test]
    fn a_reader_dropped_during_a_search_ends_its_workers_at_once() {
        let blob = false_starts(8);
        let mut r = start(Arc::new(blob), 2, TEST_SIZES).unwrap().unwrap();
        r.read_exact(&mut [0; 1000]).unwrap();
        // The workers are deep in parts 1 and 2 by now.
        std::thread::sleep(Duration::from_millis(200));
        drops_at_once(r);
    }
}
