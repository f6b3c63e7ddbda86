//! Sort runs in PostgreSQL's temporary files (BufFile): in
//! `temp_tablespaces`, counted by `log_temp_files` and `temp_file_limit`,
//! deleted when the transaction ends however it ends. The file is only
//! made when the first run is written.

use gpuindex_engine::external_sort::RunStore;
use pgrx::pg_sys;

#[derive(Default)]
pub struct TempFile {
    file: Option<*mut pg_sys::BufFile>,
    /// Where the next append goes; reads move BufFile's position.
    end: u64,
}

impl TempFile {
    pub fn new() -> Self {
        Self::default()
    }

    /// Positions the file at `offset` (BufFile takes one offset past its
    /// 1 GB segments and finds the segment), making it if need be.
    fn seek(&mut self, offset: u64) -> *mut pg_sys::BufFile {
        // SAFETY: plain calls in a transaction; the file belongs to the
        // current resource owner, which closes it on abort.
        let file = *self.file.get_or_insert_with(|| unsafe {
            pg_sys::PrepareTempTablespaces();
            pg_sys::BufFileCreateTemp(false)
        });
        // SAFETY: an open BufFile; offsets are within what was written.
        if unsafe { pg_sys::BufFileSeek(file, 0, offset as pg_sys::off_t, libc::SEEK_SET) } != 0 {
            pgrx::error!("could not seek in a gpuindex sort file to offset {offset}");
        }
        file
    }
}

impl RunStore for TempFile {
    fn append(&mut self, bytes: &[u8]) {
        let file = self.seek(self.end);
        // SAFETY: BufFileWrite reads `bytes` and raises an ERROR on failure.
        unsafe { pg_sys::BufFileWrite(file, bytes.as_ptr() as *mut std::ffi::c_void, bytes.len()) };
        self.end += bytes.len() as u64;
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) {
        let file = self.seek(offset);
        // SAFETY: BufFileRead fills at most buf.len() bytes.
        let n = unsafe { pg_sys::BufFileRead(file, buf.as_mut_ptr() as *mut std::ffi::c_void, buf.len()) };
        if n != buf.len() {
            pgrx::error!("could not read a gpuindex sort file: read only {n} of {} bytes", buf.len());
        }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        // While an ERROR unwinds, no PostgreSQL call: the transaction's
        // resource owner closes and deletes the file on abort.
        if let (Some(file), false) = (self.file, std::thread::panicking()) {
            // SAFETY: an open BufFile, closed once.
            unsafe { pg_sys::BufFileClose(file) };
        }
    }
}
