//! Output and input files: compression by frames, atomic replacement, line readers.
//!
//! A compressed export is a sequence of independent frames (gzip members, zstd frames), one
//! per page. Standard tools (`gzip -d`, `zstd -d`) read such files as one stream, and a
//! resumed export can cut the file back to the last checkpointed frame and append — giving
//! the same bytes as an uninterrupted run.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use clap::ValueEnum;

/// Compression of export files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
pub(crate) enum Compression {
    /// Plain JSON Lines.
    None,
    /// gzip (one member per page).
    Gzip,
    /// Zstandard (one frame per page).
    Zstd,
}

impl Compression {
    /// The compression a file name implies: `.gz` gzip, `.zst` zstd, else none.
    pub(crate) fn from_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("gz" | "gzip") => Compression::Gzip,
            Some("zst" | "zstd") => Compression::Zstd,
            _ => Compression::None,
        }
    }

    /// The file extension of parts written with this compression.
    pub(crate) fn part_extension(self) -> &'static str {
        match self {
            Compression::None => "jsonl",
            Compression::Gzip => "jsonl.gz",
            Compression::Zstd => "jsonl.zst",
        }
    }

    /// `data` as one self-contained frame (or as is, uncompressed). Deterministic: the gzip
    /// header carries no time or name.
    pub(crate) fn frame(self, data: Vec<u8>) -> io::Result<Vec<u8>> {
        match self {
            Compression::None => Ok(data),
            Compression::Gzip => {
                let mut encoder = flate2::GzBuilder::new().write(
                    Vec::with_capacity(data.len() / 4),
                    flate2::Compression::default(),
                );
                encoder.write_all(&data)?;
                encoder.finish()
            }
            Compression::Zstd => Ok(ruzstd::encoding::compress_to_vec(
                data.as_slice(),
                ruzstd::encoding::CompressionLevel::Fastest,
            )),
        }
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, synced, then renamed
/// over it. A reader (or a resumed run) sees the old content or the new, never a mix.
pub(crate) fn replace_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    // The rename is durable once the directory is; not every platform can open one.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

/// Opens an output file for appending after its first `keep` bytes (`None`: a new, empty
/// file). Bytes past `keep` — written after the last checkpoint — are cut off.
///
/// # Errors
/// I/O errors, and `InvalidData` when the file is shorter than `keep` (it is not the file
/// the checkpoint describes).
pub(crate) fn open_output(path: &Path, keep: Option<u64>) -> io::Result<File> {
    match keep {
        None => File::create(path),
        Some(keep) => {
            let file = OpenOptions::new().read(true).write(true).open(path)?;
            let len = file.metadata()?.len();
            if len < keep {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("is {len} bytes long, shorter than its checkpoint's {keep}"),
                ));
            }
            file.set_len(keep)?;
            let mut file = file;
            io::Seek::seek(&mut file, io::SeekFrom::End(0))?;
            Ok(file)
        }
    }
}

/// The lines of a JSON Lines file, decompressed by its extension.
pub(crate) fn open_lines(path: &Path) -> io::Result<Box<dyn BufRead + Send>> {
    let file = BufReader::with_capacity(1 << 16, File::open(path)?);
    Ok(decompressing(Box::new(file), Compression::from_path(path)))
}

/// `input` decompressed as `compression` says.
pub(crate) fn decompressing(
    input: Box<dyn BufRead + Send>,
    compression: Compression,
) -> Box<dyn BufRead + Send> {
    match compression {
        Compression::None => input,
        Compression::Gzip => Box::new(BufReader::new(GzMembers::new(input))),
        Compression::Zstd => Box::new(BufReader::new(ZstdFrames {
            source: Some(input),
            frame: None,
        })),
    }
}

/// Every gzip member of a stream in turn; an empty stream is empty (an export of an empty
/// table has no member).
struct GzMembers<R: BufRead> {
    inner: Option<flate2::bufread::MultiGzDecoder<R>>,
    source: Option<R>,
}

impl<R: BufRead> GzMembers<R> {
    fn new(source: R) -> Self {
        Self {
            inner: None,
            source: Some(source),
        }
    }
}

impl<R: BufRead> Read for GzMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(mut source) = self.source.take() {
            if source.fill_buf()?.is_empty() {
                return Ok(0);
            }
            self.inner = Some(flate2::bufread::MultiGzDecoder::new(source));
        }
        match &mut self.inner {
            Some(decoder) => decoder.read(buf),
            None => Ok(0),
        }
    }
}

/// Every zstd frame of a stream in turn.
struct ZstdFrames<R: BufRead> {
    source: Option<R>,
    frame: Option<ruzstd::decoding::StreamingDecoder<R, ruzstd::decoding::FrameDecoder>>,
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(frame) = &mut self.frame {
                let n = frame.read(buf)?;
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
                // This frame is done: the next one starts where it ended.
                let done = self.frame.take();
                self.source = done.map(ruzstd::decoding::StreamingDecoder::into_inner);
            }
            let Some(mut source) = self.source.take() else {
                return Ok(0);
            };
            if source.fill_buf()?.is_empty() {
                return Ok(0);
            }
            let frame = ruzstd::decoding::StreamingDecoder::new(source)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            self.frame = Some(frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(path: &Path) -> String {
        let mut text = String::new();
        open_lines(path).unwrap().read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn frames_concatenate_into_one_readable_stream() {
        let dir = std::env::temp_dir().join(format!("tablekit-cli-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let path = dir.join(format!("x.{}", c.part_extension()));
            assert_eq!(Compression::from_path(&path), c);
            let mut file = open_output(&path, None).unwrap();
            assert_eq!(read_all(&path), "", "{c:?}: an empty file has no lines");
            let first = c.frame(b"{\"a\":1}\n".to_vec()).unwrap();
            let second = c.frame(b"{\"b\":2}\n".to_vec()).unwrap();
            file.write_all(&first).unwrap();
            file.write_all(&second).unwrap();
            drop(file);
            assert_eq!(read_all(&path), "{\"a\":1}\n{\"b\":2}\n", "{c:?}");
            assert_eq!(
                c.frame(b"x".to_vec()).unwrap(),
                c.frame(b"x".to_vec()).unwrap()
            );
            // Cut back to the first frame, as a resume does, and append again.
            let mut file = open_output(&path, Some(first.len() as u64)).unwrap();
            file.write_all(&second).unwrap();
            drop(file);
            assert_eq!(read_all(&path), "{\"a\":1}\n{\"b\":2}\n", "{c:?}");
            let short = open_output(&path, Some(1 << 20)).unwrap_err();
            assert_eq!(short.kind(), io::ErrorKind::InvalidData);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
