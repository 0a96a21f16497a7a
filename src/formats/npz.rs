//! NumPy `.npz` archives: a zip file of `.npy` members.
//!
//! The reader parses the zip central directory itself (with zip64 records, which numpy's
//! `savez` always writes in local headers) and inflates deflated members with
//! `miniz_oxide`. It trusts nothing: the end record, central directory and every local header
//! must lie inside the file, members must not overlap, a deflated member's declared size is
//! bounded by deflate's maximum ratio and enforced while inflating, and the CRC-32 of every
//! member is checked. Memory is bounded twice: the declared sizes of all deflated members
//! together may not pass the reader's limit ([`DEFAULT_MAX_INFLATED`] unless raised), and a
//! member is inflated only as far as its `.npy` header first, so a header whose shape
//! disagrees with the declared size is refused before the member's buffer is allocated; that
//! allocation is fallible, so a refused one is an error, never an abort. The writer stores
//! members uncompressed, as `numpy.savez` does.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use super::FormatError;
use super::atomic::write_atomic;
use super::npy::{self, NpyArray};
use super::source::{Cursor, Source};
use crate::error::{Error, Result};

const FORMAT: &str = "npz";

/// Deflate cannot expand data more than 1032 : 1 (a 258-byte match coded in under two bits);
/// a member declaring more is lying and is refused before anything is inflated.
pub const MAX_DEFLATE_RATIO: u64 = 1032;

/// The default bound on the bytes a reader inflates: the declared sizes of all deflated
/// members together. Far above any npz kinema reads (motions, skinning tables); raise it with
/// [`NpzReader::open_with_limit`].
pub const DEFAULT_MAX_INFLATED: u64 = 1 << 30;

const SIG_LOCAL: u32 = 0x0403_4b50;
const SIG_CENTRAL: u32 = 0x0201_4b50;
const SIG_EOCD: u32 = 0x0605_4b50;
const SIG_ZIP64_EOCD: u32 = 0x0606_4b50;
const SIG_ZIP64_LOCATOR: u32 = 0x0706_4b50;
const EOCD_LEN: usize = 22;
const CENTRAL_LEN: u64 = 46;
const LOCAL_LEN: u64 = 30;
const METHOD_STORED: u16 = 0;
const METHOD_DEFLATE: u16 = 8;

fn invalid(msg: impl Into<String>) -> Error {
    FormatError::invalid(FORMAT, msg).into()
}

/// CRC-32 (IEEE 802.3, reflected, as zip uses).
fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    !data.iter().fold(!0u32, |c, &b| {
        TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8)
    })
}

/// One member as the central directory describes it, with its data range resolved.
#[derive(Clone, Debug)]
struct Member {
    /// Name with a trailing `.npy` removed.
    name: String,
    method: u16,
    crc: u32,
    data_start: usize,
    compressed: usize,
    uncompressed: usize,
}

/// A parsed `.npz` archive; members are read (and inflated) on demand.
pub struct NpzReader {
    src: Source,
    members: Vec<Member>,
    index: HashMap<String, usize>,
}

impl std::fmt::Debug for NpzReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpzReader")
            .field("names", &self.names())
            .finish()
    }
}

impl NpzReader {
    /// Memory-map and parse the archive at `path` (a regular file) with the default limit
    /// on inflated bytes.
    pub fn open(path: impl AsRef<Path>) -> Result<NpzReader> {
        NpzReader::open_with_limit(path, DEFAULT_MAX_INFLATED)
    }

    /// As [`NpzReader::open`], with `max_inflated` bounding the declared sizes of all
    /// deflated members together.
    pub fn open_with_limit(path: impl AsRef<Path>, max_inflated: u64) -> Result<NpzReader> {
        NpzReader::from_source(Source::map(path.as_ref())?, max_inflated)
    }

    /// Parse an archive held in memory with the default limit on inflated bytes.
    pub fn from_bytes(bytes: impl Into<Arc<[u8]>>) -> Result<NpzReader> {
        NpzReader::from_bytes_with_limit(bytes, DEFAULT_MAX_INFLATED)
    }

    /// As [`NpzReader::from_bytes`], with `max_inflated` bounding the declared sizes of all
    /// deflated members together.
    pub fn from_bytes_with_limit(
        bytes: impl Into<Arc<[u8]>>,
        max_inflated: u64,
    ) -> Result<NpzReader> {
        NpzReader::from_source(Source::Owned(bytes.into()), max_inflated)
    }

    fn from_source(src: Source, max_inflated: u64) -> Result<NpzReader> {
        let members = parse_directory(src.bytes())?;
        let inflated = members
            .iter()
            .filter(|m| m.method == METHOD_DEFLATE)
            .fold(0u64, |a, m| a.saturating_add(m.uncompressed as u64));
        if inflated > max_inflated {
            return Err(FormatError::Limit {
                format: FORMAT,
                what: "declared size of the deflated members".into(),
                value: inflated,
                limit: max_inflated,
            }
            .into());
        }
        let mut index = HashMap::with_capacity(members.len());
        for (i, m) in members.iter().enumerate() {
            if index.insert(m.name.clone(), i).is_some() {
                return Err(FormatError::Duplicate {
                    format: FORMAT,
                    what: "array",
                    name: m.name.clone(),
                }
                .into());
            }
        }
        Ok(NpzReader {
            src,
            members,
            index,
        })
    }

    /// Array names (member names without `.npy`), in directory order.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(|m| m.name.as_str()).collect()
    }

    /// The array stored as `name` (or `name.npy`; a trailing `.npy` in `name` is accepted).
    pub fn array(&self, name: &str) -> Result<NpyArray> {
        let i = self
            .index
            .get(name)
            .or_else(|| name.strip_suffix(".npy").and_then(|n| self.index.get(n)))
            .ok_or_else(|| FormatError::missing_tensor(FORMAT, name))?;
        let m = &self.members[*i];
        let in_entry = |e: Error| -> Error {
            FormatError::InEntry {
                format: FORMAT,
                entry: m.name.clone(),
                source: Box::new(e),
            }
            .into()
        };
        let bytes = self.member_bytes(m).map_err(in_entry)?;
        npy::read(&bytes).map_err(in_entry)
    }

    fn member_bytes(&self, m: &Member) -> Result<Vec<u8>> {
        // The directory parser checked this range against the file.
        let raw = &self.src.bytes()[m.data_start..m.data_start + m.compressed];
        let out = match m.method {
            METHOD_STORED => raw.to_vec(),
            _ => inflate_member(raw, m.uncompressed)?,
        };
        let crc = crc32(&out);
        if crc != m.crc {
            return Err(invalid(format!(
                "CRC-32 {crc:#010x} does not match the declared {:#010x}",
                m.crc
            )));
        }
        Ok(out)
    }
}

/// Inflate a member that declares `size` bytes: first as far as its `.npy` header, whose
/// shape must account for exactly `size` bytes, then the rest into a buffer reserved
/// fallibly. The stream must end at exactly `size` bytes.
fn inflate_member(raw: &[u8], size: usize) -> Result<Vec<u8>> {
    use miniz_oxide::inflate::TINFLStatus;
    use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};

    struct Inflater<'a> {
        state: Box<DecompressorOxide>,
        input: &'a [u8],
        out: Vec<u8>,
        filled: usize,
        done: bool,
    }
    impl Inflater<'_> {
        /// Inflate until `target` bytes are out or the stream ends.
        fn fill(&mut self, target: usize) -> Result<()> {
            let grow = target.saturating_sub(self.out.len());
            self.out
                .try_reserve_exact(grow)
                .map_err(|_| invalid(format!("cannot allocate {target} bytes for a member")))?;
            self.out.resize(target.max(self.out.len()), 0);
            // The whole output so far is passed each time: deflate's matches reach back into
            // it.
            let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
            while !self.done && self.filled < target {
                let (status, read, written) = decompress(
                    &mut self.state,
                    self.input,
                    &mut self.out[..target],
                    self.filled,
                    flags,
                );
                self.input = self.input.get(read..).unwrap_or_default();
                self.filled += written;
                match status {
                    TINFLStatus::Done => self.done = true,
                    TINFLStatus::HasMoreOutput => {}
                    s => return Err(invalid(format!("deflate stream: {s:?}"))),
                }
            }
            Ok(())
        }
    }

    let mut z = Inflater {
        state: Box::default(),
        input: raw,
        out: Vec::new(),
        filled: 0,
        done: false,
    };
    // The header first: a preamble, then as much as it says the header needs.
    let mut want = 64.min(size);
    loop {
        z.fill(want)?;
        if z.done || z.filled == size {
            break;
        }
        match npy::declared_len(&z.out[..z.filled]) {
            Ok(npy::Declared::NeedPrefix(n)) => {
                want = usize::try_from(n).unwrap_or(usize::MAX).min(size);
                if want <= z.filled {
                    break;
                }
            }
            Ok(npy::Declared::Total(total)) => {
                if total != size as u64 {
                    return Err(invalid(format!(
                        "its npy header declares {total} bytes, the directory {size}"
                    )));
                }
                break;
            }
            // The full parse after inflating reports a bad header with its context.
            Err(_) => break,
        }
    }
    z.fill(size)?;
    if !z.done && z.filled == size {
        // The buffer is full: the stream must end here. One more byte of room shows whether
        // it would write past the declared size.
        z.fill(size.saturating_add(1))?;
        if !z.done || z.filled > size {
            return Err(invalid(format!(
                "the deflate stream runs past the declared {size} bytes"
            )));
        }
    }
    if z.filled != size {
        return Err(invalid(format!(
            "inflates to {} bytes, the directory declares {size}",
            z.filled
        )));
    }
    z.out.truncate(size);
    Ok(z.out)
}

/// Where the central directory is, from the (zip64) end-of-central-directory records.
struct Directory {
    entries: u64,
    offset: u64,
    size: u64,
    /// Offset of the first end record; the directory must end at or before it.
    end: usize,
}

fn find_directory(buf: &[u8]) -> Result<Directory> {
    // The end record is the last 22 bytes plus a comment of up to 65535 bytes; its comment
    // length must reach exactly to the end of the file.
    let lowest = buf.len().saturating_sub(EOCD_LEN + u16::MAX as usize);
    let eocd = (lowest..=buf.len().saturating_sub(EOCD_LEN))
        .rev()
        .filter(|&p| p + EOCD_LEN <= buf.len())
        .find(|&p| {
            buf[p..p + 4] == SIG_EOCD.to_le_bytes()
                && p + EOCD_LEN + u16::from_le_bytes([buf[p + 20], buf[p + 21]]) as usize
                    == buf.len()
        })
        .ok_or_else(|| invalid("no end-of-central-directory record: not a zip file"))?;
    let mut c = Cursor::new(FORMAT, buf);
    c.pos = eocd + 4;
    let e = || "end record".to_string();
    let (disk, cd_disk) = (c.u16(e)?, c.u16(e)?);
    let (on_disk, total) = (c.u16(e)?, c.u16(e)?);
    let size = c.u32(e)?;
    let offset = c.u32(e)?;
    if disk != 0 || cd_disk != 0 || on_disk != total {
        return Err(FormatError::unsupported(FORMAT, "multi-disk zip archives").into());
    }
    // A zip64 locator sits right before the end record when the archive needs zip64.
    let has_locator = eocd >= 20 && buf[eocd - 20..eocd - 16] == SIG_ZIP64_LOCATOR.to_le_bytes();
    if !has_locator {
        return Ok(Directory {
            entries: total.into(),
            offset: offset.into(),
            size: size.into(),
            end: eocd,
        });
    }
    c.pos = eocd - 16;
    let l = || "zip64 locator".to_string();
    let _disk = c.u32(l)?;
    let z64 = c.u64(l)?;
    let z64 = usize::try_from(z64)
        .ok()
        .filter(|&z| z <= eocd - 20)
        .ok_or_else(|| invalid("zip64 end record offset lies outside the archive"))?;
    c.pos = z64;
    let z = || "zip64 end record".to_string();
    if c.u32(z)? != SIG_ZIP64_EOCD {
        return Err(invalid("bad zip64 end record signature"));
    }
    let _record_size = c.u64(z)?;
    let _versions = c.u32(z)?;
    let (disk, cd_disk) = (c.u32(z)?, c.u32(z)?);
    let (on_disk, total) = (c.u64(z)?, c.u64(z)?);
    let (size, offset) = (c.u64(z)?, c.u64(z)?);
    if disk != 0 || cd_disk != 0 || on_disk != total {
        return Err(FormatError::unsupported(FORMAT, "multi-disk zip archives").into());
    }
    Ok(Directory {
        entries: total,
        offset,
        size,
        end: z64,
    })
}

/// Read the 64-bit values a zip64 extra field holds for the 32-bit fields that are 0xFFFFFFFF.
fn apply_zip64(extra: &[u8], fields: &mut [&mut u64]) -> Result<()> {
    let mut c = Cursor::new(FORMAT, extra);
    while c.remaining() >= 4 {
        let id = c.u16(|| "extra field id".into())?;
        let len = c.u16(|| "extra field length".into())?;
        let body = c.take(len.into(), || "extra field".into())?;
        if id == 0x0001 {
            let mut z = Cursor::new(FORMAT, body);
            for f in fields.iter_mut().filter(|f| ***f == u32::MAX as u64) {
                **f = z.u64(|| "zip64 extra field".into())?;
            }
            return Ok(());
        }
    }
    if fields.iter().any(|f| **f == u32::MAX as u64) {
        return Err(invalid(
            "a 0xFFFFFFFF size or offset without a zip64 extra field",
        ));
    }
    Ok(())
}

fn parse_directory(buf: &[u8]) -> Result<Vec<Member>> {
    let dir = find_directory(buf)?;
    let cd_end = dir
        .offset
        .checked_add(dir.size)
        .filter(|&e| e <= dir.end as u64)
        .ok_or_else(|| invalid("the central directory lies outside the archive"))?;
    // Bounded by the end record's position above, so these fit usize.
    let (cd_start, cd_end) = (dir.offset as usize, cd_end as usize);
    if dir.entries > dir.size / CENTRAL_LEN {
        return Err(invalid(format!(
            "{} entries cannot fit a {}-byte central directory",
            dir.entries, dir.size
        )));
    }
    let mut c = Cursor::new(FORMAT, &buf[..cd_end]);
    c.pos = cd_start;
    let mut members = Vec::with_capacity(dir.entries as usize);
    let mut spans = Vec::with_capacity(dir.entries as usize);
    for i in 0..dir.entries {
        let h = || format!("central directory entry {i}");
        if c.u32(h)? != SIG_CENTRAL {
            return Err(invalid(format!(
                "bad signature of central directory entry {i}"
            )));
        }
        let _made_by = c.u16(h)?;
        let _needed = c.u16(h)?;
        let flags = c.u16(h)?;
        let method = c.u16(h)?;
        let _time_date = c.u32(h)?;
        let crc = c.u32(h)?;
        let mut compressed = u64::from(c.u32(h)?);
        let mut uncompressed = u64::from(c.u32(h)?);
        let name_len = c.u16(h)?;
        let extra_len = c.u16(h)?;
        let comment_len = c.u16(h)?;
        let _disk = c.u16(h)?;
        let _attrs = (c.u16(h)?, c.u32(h)?);
        let mut local = u64::from(c.u32(h)?);
        let raw_name = c.take(name_len.into(), h)?;
        let extra = c.take(extra_len.into(), h)?;
        c.take(comment_len.into(), h)?;
        let full_name = std::str::from_utf8(raw_name)
            .map_err(|_| invalid(format!("name of entry {i} is not valid UTF-8")))?;
        let what = |msg: &str| invalid(format!("entry {full_name:?}: {msg}"));
        apply_zip64(extra, &mut [&mut uncompressed, &mut compressed, &mut local])?;
        if flags & 1 != 0 {
            return Err(FormatError::unsupported(
                FORMAT,
                format!("entry {full_name:?} is encrypted"),
            )
            .into());
        }
        match method {
            METHOD_STORED if compressed != uncompressed => {
                return Err(what(&format!(
                    "stored with compressed size {compressed} != size {uncompressed}"
                )));
            }
            METHOD_STORED => {}
            METHOD_DEFLATE if uncompressed > compressed.saturating_mul(MAX_DEFLATE_RATIO) => {
                return Err(FormatError::Limit {
                    format: FORMAT,
                    what: format!(
                        "declared size of entry {full_name:?} ({compressed} bytes deflated)"
                    ),
                    value: uncompressed,
                    limit: compressed.saturating_mul(MAX_DEFLATE_RATIO),
                }
                .into());
            }
            METHOD_DEFLATE => {}
            m => {
                return Err(FormatError::unsupported(
                    FORMAT,
                    format!("entry {full_name:?} uses compression method {m}"),
                )
                .into());
            }
        }
        // The local header: its own name (and extra field) precede the data.
        let local = usize::try_from(local)
            .ok()
            .filter(|&l| l < cd_start)
            .ok_or_else(|| what("local header offset lies outside the archive"))?;
        let mut lc = Cursor::new(FORMAT, &buf[..cd_start]);
        lc.pos = local;
        let lh = || format!("local header of entry {full_name:?}");
        if lc.u32(lh)? != SIG_LOCAL {
            return Err(what("bad local header signature"));
        }
        // Version, flags, method, time, date, CRC and sizes: the directory's copies rule.
        lc.take(22, lh)?;
        let lname_len = lc.u16(lh)?;
        let lextra_len = lc.u16(lh)?;
        if lc.take(lname_len.into(), lh)? != raw_name {
            return Err(what("the local header names another file"));
        }
        lc.take(lextra_len.into(), lh)?;
        let data_start = lc.pos;
        lc.take(compressed, || format!("data of entry {full_name:?}"))?;
        let data_end = lc.pos;
        // A stored member needs no more memory than its bytes in the file; a deflated one at
        // most MAX_DEFLATE_RATIO times more, so both fit usize here.
        let uncompressed =
            usize::try_from(uncompressed).map_err(|_| what("declared size overflows usize"))?;
        spans.push((local, data_end, full_name.to_string()));
        members.push(Member {
            name: full_name
                .strip_suffix(".npy")
                .unwrap_or(full_name)
                .to_string(),
            method,
            crc,
            data_start,
            compressed: data_end - data_start,
            uncompressed,
        });
    }
    // Members may not share bytes (overlapping members multiply a small file's output).
    spans.sort();
    for w in spans.windows(2) {
        if w[0].1 > w[1].0 {
            return Err(invalid(format!(
                "entries {:?} and {:?} overlap",
                w[0].2, w[1].2
            )));
        }
    }
    Ok(members)
}

/// Builds an `.npz` archive of stored (uncompressed) members, as `numpy.savez` does. Arrays
/// are serialised when added; nothing touches the disk until [`NpzWriter::write`], which
/// writes a temporary file and renames it into place.
#[derive(Default)]
pub struct NpzWriter {
    members: Vec<(String, Vec<u8>, u32)>,
    names: HashSet<String>,
}

/// zip without zip64 records holds 32-bit sizes and offsets and 16-bit counts.
const ZIP32_MAX: u64 = u32::MAX as u64 - 1;

impl NpzWriter {
    pub fn new() -> NpzWriter {
        NpzWriter::default()
    }

    /// Add `name` (stored as `name.npy`). Duplicate and empty names are refused.
    pub fn add(&mut self, name: &str, a: &NpyArray) -> Result<()> {
        if name.is_empty() || name.len() > u16::MAX as usize - 4 {
            return Err(invalid(format!(
                "array name {name:?} must have 1 to {} bytes",
                u16::MAX as usize - 4
            )));
        }
        if !self.names.insert(name.to_string()) {
            return Err(FormatError::Duplicate {
                format: FORMAT,
                what: "array",
                name: name.to_string(),
            }
            .into());
        }
        let bytes = npy::to_bytes(a)?;
        let crc = crc32(&bytes);
        self.members.push((format!("{name}.npy"), bytes, crc));
        Ok(())
    }

    /// The archive must fit plain zip (no zip64 records): under 4 GiB, at most 65535 arrays.
    fn check_size(&self) -> Result<()> {
        let mut end = 0u64;
        for (name, bytes, _) in &self.members {
            end += LOCAL_LEN + name.len() as u64 + bytes.len() as u64;
            end += CENTRAL_LEN + name.len() as u64;
        }
        if self.members.len() > u16::MAX as usize || end > ZIP32_MAX {
            return Err(FormatError::unsupported(
                FORMAT,
                format!(
                    "{} arrays in {end} bytes need zip64, which kinema does not write",
                    self.members.len()
                ),
            )
            .into());
        }
        Ok(())
    }

    /// Write the archive to `path` atomically (temporary file, fsync, rename).
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        self.check_size()?;
        write_atomic(path, |w| self.emit(w))
    }

    /// Write the archive to a stream.
    pub fn write_to(&self, mut w: impl Write) -> Result<()> {
        self.check_size()?;
        self.emit(&mut w).map_err(FormatError::write(FORMAT))
    }

    fn emit(&self, w: &mut dyn Write) -> io::Result<()> {
        // Fixed timestamp (1980-01-01 00:00, the zip epoch) keeps the output reproducible.
        const DOS_DATE: u16 = (1 << 5) | 1;
        // Sizes were checked to fit 32 bits in check_size.
        let mut offsets = Vec::with_capacity(self.members.len());
        let mut pos = 0u32;
        for (name, bytes, crc) in &self.members {
            offsets.push(pos);
            let mut h = Vec::with_capacity(LOCAL_LEN as usize + name.len());
            h.extend_from_slice(&SIG_LOCAL.to_le_bytes());
            h.extend_from_slice(&20u16.to_le_bytes()); // version needed: 2.0
            h.extend_from_slice(&0u16.to_le_bytes()); // flags
            h.extend_from_slice(&METHOD_STORED.to_le_bytes());
            h.extend_from_slice(&0u16.to_le_bytes()); // time
            h.extend_from_slice(&DOS_DATE.to_le_bytes());
            h.extend_from_slice(&crc.to_le_bytes());
            h.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            h.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            h.extend_from_slice(&(name.len() as u16).to_le_bytes());
            h.extend_from_slice(&0u16.to_le_bytes()); // extra length
            h.extend_from_slice(name.as_bytes());
            w.write_all(&h)?;
            w.write_all(bytes)?;
            pos += (h.len() + bytes.len()) as u32;
        }
        let cd_start = pos;
        let mut cd = Vec::new();
        for ((name, bytes, crc), off) in self.members.iter().zip(offsets) {
            cd.extend_from_slice(&SIG_CENTRAL.to_le_bytes());
            cd.extend_from_slice(&0x0314u16.to_le_bytes()); // made by: unix, zip 2.0
            cd.extend_from_slice(&20u16.to_le_bytes()); // version needed
            cd.extend_from_slice(&0u16.to_le_bytes()); // flags
            cd.extend_from_slice(&METHOD_STORED.to_le_bytes());
            cd.extend_from_slice(&0u16.to_le_bytes()); // time
            cd.extend_from_slice(&DOS_DATE.to_le_bytes());
            cd.extend_from_slice(&crc.to_le_bytes());
            cd.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            cd.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            cd.extend_from_slice(&(name.len() as u16).to_le_bytes());
            cd.extend_from_slice(&[0; 8]); // extra, comment, disk, internal attributes
            cd.extend_from_slice(&(0o100_644u32 << 16).to_le_bytes()); // regular file, rw-r--r--
            cd.extend_from_slice(&off.to_le_bytes());
            cd.extend_from_slice(name.as_bytes());
        }
        let n = self.members.len() as u16;
        let cd_size = cd.len() as u32;
        cd.extend_from_slice(&SIG_EOCD.to_le_bytes());
        cd.extend_from_slice(&[0; 4]); // disk numbers
        cd.extend_from_slice(&n.to_le_bytes());
        cd.extend_from_slice(&n.to_le_bytes());
        cd.extend_from_slice(&cd_size.to_le_bytes());
        cd.extend_from_slice(&cd_start.to_le_bytes());
        cd.extend_from_slice(&0u16.to_le_bytes()); // comment length
        w.write_all(&cd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }
}
