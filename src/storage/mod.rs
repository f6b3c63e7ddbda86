//! The only buffer-manager code: pinned and locked pages, GenericXLog
//! records, new pages, and the page layout shared by gpuindex's access
//! methods (standard page header, a typed special area, contents kept
//! between pd_lower and pd_upper so that WAL and full-page images skip the
//! unused middle).

mod buffer;
mod page;
mod recent;
pub mod recycle;
pub mod rmgr;
mod temp_file;
mod tid;
mod visibility;
pub mod wal;
mod xlog;

pub use buffer::{new_page, new_page_in, release_all, Exclusive, Fork, Locked, Pins, Shared};
pub use page::{content_bytes, PageData, PageMut, PageRef, SpecialArea, CONTENT_START};
pub use recent::{prefetch, RecentPages};
pub use temp_file::TempFile;
pub use tid::{tid_from, tid_from_bytes, tid_to, Tid};
pub use visibility::VisibilityMap;
pub use xlog::Xlog;
