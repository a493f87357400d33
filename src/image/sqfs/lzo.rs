//! LZO1X decompression, for squashfs images made with `-comp lzo` (enroot's default:
//! `ENROOT_SQUASH_OPTIONS="-comp lzo -noD"`). Written here because the Rust ports are either
//! GPL (minilzo-rs, rust-lzo; this project is Apache-2.0) or, as lzokay-native 0.1 (MIT),
//! without an output limit and panicking on a back-reference before the start. Follows the
//! format as the Linux kernel documents it (Documentation/staging/lzo.rst); every copy is
//! checked against the input, the output limit and the data written so far.

/// Why a stream is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LzoError {
    #[error("lzo: stream truncated")]
    Truncated,
    #[error("lzo: data after the end of the stream")]
    TrailingData,
    #[error("lzo: data longer than {limit} bytes")]
    TooLong { limit: usize },
    #[error("lzo: reference before the start of the data")]
    BeforeStart,
}

/// Decompress one LZO1X stream into at most `limit` bytes.
pub fn decompress(input: &[u8], limit: usize) -> Result<Vec<u8>, LzoError> {
    let mut d = Decoder {
        input,
        pos: 0,
        out: Vec::with_capacity(limit),
        limit,
    };
    d.run()?;
    if d.pos != input.len() {
        return Err(LzoError::TrailingData);
    }
    Ok(d.out)
}

struct Decoder<'a> {
    input: &'a [u8],
    pos: usize,
    out: Vec<u8>,
    limit: usize,
}

impl Decoder<'_> {
    fn byte(&mut self) -> Result<usize, LzoError> {
        let b = *self.input.get(self.pos).ok_or(LzoError::Truncated)?;
        self.pos += 1;
        Ok(b as usize)
    }

    fn le16(&mut self) -> Result<usize, LzoError> {
        Ok(self.byte()? | self.byte()? << 8)
    }

    /// A length whose field was 0: `base`, plus 255 per zero byte, plus the first non-zero byte.
    fn long_length(&mut self, base: usize) -> Result<usize, LzoError> {
        let mut n = base;
        loop {
            match self.byte()? {
                0 => n += 255,
                b => return Ok(n + b),
            }
        }
    }

    fn literals(&mut self, n: usize) -> Result<(), LzoError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.input.len());
        let end = end.ok_or(LzoError::Truncated)?;
        if self.out.len() + n > self.limit {
            return Err(LzoError::TooLong { limit: self.limit });
        }
        self.out.extend_from_slice(&self.input[self.pos..end]);
        self.pos = end;
        Ok(())
    }

    /// Copy `len` bytes starting `distance` bytes back; the ranges may overlap (a run).
    fn back_copy(&mut self, distance: usize, len: usize) -> Result<(), LzoError> {
        if distance == 0 || distance > self.out.len() {
            return Err(LzoError::BeforeStart);
        }
        if self.out.len() + len > self.limit {
            return Err(LzoError::TooLong { limit: self.limit });
        }
        // An overlapping copy repeats the last `distance` bytes: copy what exists, which
        // doubles each round, until `len` bytes are written.
        let from = self.out.len() - distance;
        let mut left = len;
        while left > 0 {
            let n = left.min(self.out.len() - from);
            self.out.extend_from_within(from..from + n);
            left -= n;
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), LzoError> {
        // `state`: literals copied by the last instruction (4 = four or more), which decides
        // what an instruction byte below 16 means.
        let mut state = 0;
        // A first byte of 18 or more is a literal run of its value minus 17.
        if let Some(&b) = self.input.first().filter(|&&b| b >= 18) {
            self.pos = 1;
            let n = b as usize - 17;
            self.literals(n)?;
            state = n.min(4);
        }
        loop {
            let t = self.byte()?;
            let (distance, len);
            if t < 16 {
                match state {
                    0 => {
                        let n = if t == 0 { self.long_length(15)? } else { t };
                        self.literals(n + 3)?;
                        state = 4;
                        continue;
                    }
                    1..=3 => {
                        distance = (self.byte()? << 2) + (t >> 2) + 1;
                        len = 2;
                    }
                    _ => {
                        distance = (self.byte()? << 2) + (t >> 2) + 2049;
                        len = 3;
                    }
                }
                self.back_copy(distance, len)?;
                state = t & 3;
            } else if t >= 64 {
                // 3-4 bytes (64..127) or 5-8 bytes (128..255), within 2 kB
                distance = (self.byte()? << 3) + ((t >> 2) & 7) + 1;
                len = (t >> 5) + 1;
                self.back_copy(distance, len)?;
                state = t & 3;
            } else if t >= 32 {
                let l = t & 31;
                len = 2 + if l == 0 { self.long_length(31)? } else { l };
                let v = self.le16()?;
                self.back_copy((v >> 2) + 1, len)?;
                state = v & 3;
            } else {
                let l = t & 7;
                len = 2 + if l == 0 { self.long_length(7)? } else { l };
                let v = self.le16()?;
                let far = ((t & 8) << 11) + (v >> 2);
                if far == 0 {
                    return Ok(()); // the end marker
                }
                self.back_copy(far + 16384, len)?;
                state = v & 3;
            }
            self.literals(state)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const END: [u8; 3] = [0x11, 0, 0];

    fn s(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    /// Hand-made streams, one per instruction kind (as the kernel's lzo.rst lays them out).
    #[test]
    fn instruction_table() {
        // `n` literals through the long literal form (3 + 15 + 255 per zero byte + the last),
        // then `then`: the stream, and what it decodes to when `then` copies `len` bytes from
        // `from`.
        let after_literals = |n: usize, then: &[u8], from: usize, len: usize| {
            let lits: Vec<u8> = (0..n as u32).map(|i| (i % 251) as u8).collect();
            let rest = n - 18;
            let zeros = vec![0u8; rest / 255];
            let stream = s(&[&[0x00], &zeros, &[(rest % 255) as u8], &lits, then, &END]);
            let mut want = lits.clone();
            want.extend_from_slice(&lits[from..from + len]);
            (stream, want)
        };
        let (far_stream, far_want) = after_literals(16385, &[0x12, 0x04, 0x00], 0, 4);
        // bit 3 of an M4 byte: 16 kB further back (32,769 here)
        let (farther_stream, farther_want) = after_literals(32769, &[0x1a, 0x04, 0x00], 0, 4);
        // after a literal run (state 4) a byte below 16 copies 3 bytes from 2,049 back or more
        let (m1_stream, m1_want) = after_literals(2100, &[0x00, 0x00], 2100 - 2049, 3);
        let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
            (
                "first byte 22..255: that many literals minus 17",
                s(&[&[22], b"hello", &END]),
                b"hello".to_vec(),
            ),
            (
                "first byte 18..21: 1..4 literals",
                s(&[&[18], b"a", &END]),
                b"a".to_vec(),
            ),
            (
                "M2 (64..127): 3-4 bytes from within 2 kB",
                s(&[&[21], b"abcd", &[0b0110_1100, 0x00], &END]),
                b"abcdabcd".to_vec(),
            ),
            (
                "M2 (128..255): 5-8 bytes, overlapping the bytes it writes",
                s(&[&[18], b"z", &[0b1110_0000, 0x00], &END]),
                b"zzzzzzzzz".to_vec(),
            ),
            (
                "M1 after 1..3 literals: 2 bytes from within 1 kB, then S literals",
                s(&[&[18], b"a", &[0b0000_0001, 0x00], b"b", &END]),
                b"aaab".to_vec(),
            ),
            (
                "M3 (32..63) with a long length: 2 + 31 + 255 + 5 bytes",
                s(&[&[18], b"x", &[0x20, 0x00, 0x05, 0x00, 0x00], &END]),
                vec![b'x'; 1 + 293],
            ),
            (
                "state 0, byte 1..15: 3 + n literals",
                s(&[&[0x01], b"wxyz", &END]),
                b"wxyz".to_vec(),
            ),
            (
                "M4 (16..31): from 16 kB back and more",
                far_stream,
                far_want,
            ),
            (
                "M4 with its high distance bit",
                farther_stream,
                farther_want,
            ),
            (
                "M1 after a literal run: 3 bytes from 2 kB back",
                m1_stream,
                m1_want,
            ),
        ];
        for (name, stream, want) in cases {
            assert_eq!(
                decompress(&stream, 1 << 20).as_deref(),
                Ok(&want[..]),
                "{name}"
            );
        }
    }

    #[test]
    fn malformed_streams_are_errors_not_panics() {
        let cases: Vec<(&str, Vec<u8>, usize, &str)> = vec![
            ("empty", vec![], 100, "truncated"),
            ("no end marker", s(&[&[22], b"hello"]), 100, "truncated"),
            ("literals past the input", vec![30, b'a'], 100, "truncated"),
            (
                "a reference before the start",
                s(&[&[18], b"a", &[0x00, 0x01], &END]),
                100,
                "before the start",
            ),
            (
                "longer than the limit",
                s(&[&[22], b"hello", &END]),
                4,
                "longer than 4",
            ),
            (
                "a run longer than the limit",
                s(&[&[18], b"x", &[0x20, 0x00, 0x05, 0x00, 0x00], &END]),
                100,
                "longer than 100",
            ),
            (
                "bytes after the end",
                s(&[&[22], b"hello", &END, b"?"]),
                100,
                "after the end",
            ),
        ];
        for (name, stream, limit, want) in cases {
            let e = decompress(&stream, limit).expect_err(name).to_string();
            assert!(e.contains(want), "{name}: {e}");
        }
        // every prefix of a valid stream fails cleanly
        let good = s(&[&[21], b"abcd", &[0b0110_1100, 0x00], &END]);
        for n in 0..good.len() {
            assert!(decompress(&good[..n], 100).is_err(), "prefix {n}");
        }
    }
}
