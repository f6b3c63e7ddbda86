//! gpu_art's keys: the byte-comparable, prefix-free encodings of the
//! engine's `art::keys` (text and varchar in C order with a 0 terminator,
//! bytea with its zeros escaped, uuid as its 16 bytes), decodable so that
//! index-only scans return the values. Text indexes must use a C (or
//! POSIX) collation: the byte order is the C order, and other collations
//! sort differently (an ERROR at CREATE INDEX says so).

use gpuindex_engine::art::keys as art_keys;
use gpuindex_engine::art::ByteKeys;
use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    Text,
    Bytea,
    Uuid,
}

pub fn kind_of(typ: Oid) -> Option<KeyKind> {
    match typ {
        pg_sys::TEXTOID | pg_sys::VARCHAROID => Some(KeyKind::Text),
        pg_sys::BYTEAOID => Some(KeyKind::Bytea),
        pg_sys::UUIDOID => Some(KeyKind::Uuid),
        _ => None,
    }
}

pub fn unsupported(typ: Oid) -> ! {
    crate::error::raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("gpu_art does not index type {}", crate::error::type_name(typ)),
        "gpu_art indexes text, varchar, bytea and uuid.",
    )
}

unsafe extern "C-unwind" {
    /// pg_locale.h (not in pgrx's bindings): whether a collation sorts
    /// as C does (C, POSIX, or a default collation that is one of them).
    fn lc_collate_is_c(collation: Oid) -> bool;
}

/// The key kind of an index's column, checking its collation: C order
/// only (raised at CREATE INDEX, and when an index is opened).
pub fn index_kind(index: pg_sys::Relation) -> KeyKind {
    let typ = crate::am::common::key_type(index, "gpu_art");
    let kind = kind_of(typ).unwrap_or_else(|| unsupported(typ));
    if kind == KeyKind::Text {
        // SAFETY: an open index has one collation per column.
        let coll = unsafe { *(*index).rd_indcollation };
        // SAFETY: a catalog lookup of an existing collation.
        if !unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| lc_collate_is_c(coll)) } {
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "gpu_art indexes text only in the C collation",
                "Index the column with COLLATE \"C\" (CREATE INDEX ... USING gpu_art (col COLLATE \"C\")), and write the queries' comparisons with COLLATE \"C\" too; equality (=) and prefixes (^@) are the same in every deterministic collation.",
            );
        }
    }
    kind
}

/// The bytes of `v` (of kind `kind`) its encoding is made from: a
/// varlena's (detoasted if needed), a uuid's 16.
pub fn value_bytes<'a>(v: Datum, kind: KeyKind) -> &'a [u8] {
    // SAFETY: a non-NULL datum of the kind; the detoasted copy lives in
    // the current memory context, a uuid datum points to its 16 bytes.
    unsafe {
        match kind {
            KeyKind::Uuid => std::slice::from_raw_parts(v.cast_mut_ptr::<u8>(), 16),
            KeyKind::Text | KeyKind::Bytea => {
                // Only a compressed or out-of-line value needs the (guarded)
                // call: a batch reads 128K keys here on one thread.
                let p: *mut pg_sys::varlena = v.cast_mut_ptr();
                let p = if pgrx::varlena::varatt_is_1b_e(p) || pgrx::varlena::varatt_is_4b_c(p) {
                    pg_sys::pg_detoast_datum_packed(p)
                } else {
                    p
                };
                std::slice::from_raw_parts(pgrx::varlena::vardata_any(p) as *const u8, pgrx::varlena::varsize_any_exhdr(p))
            }
        }
    }
}

/// The encoding of kind `kind`: appends a value's encoded bytes.
fn encoder(kind: KeyKind) -> fn(&[u8], &mut Vec<u8>) {
    match kind {
        KeyKind::Text => art_keys::encode_text,
        KeyKind::Bytea => art_keys::encode_bytea,
        KeyKind::Uuid => |k, out| out.extend_from_slice(k),
    }
}

/// Encodes `v` (of kind `kind`) into `out` (cleared first).
pub fn encode(v: Datum, kind: KeyKind, out: &mut Vec<u8>) {
    out.clear();
    encoder(kind)(value_bytes(v, kind), out);
}

/// The encodings of `values` (non-NULL datums of kind `kind`), in order,
/// in one buffer: their bytes read on this thread (detoasting calls
/// PostgreSQL), encoded on all cores.
pub fn encode_all(values: impl Iterator<Item = Datum>, kind: KeyKind) -> ByteKeys {
    let raw: Vec<&[u8]> = values.map(|v| value_bytes(v, kind)).collect();
    ByteKeys::encoded(&raw, encoder(kind))
}

/// The raw bytes of a text prefix (`^@`): encoded keys starting with them
/// are the texts starting with the prefix.
pub fn prefix_bytes(v: Datum) -> Vec<u8> {
    value_bytes(v, KeyKind::Text).to_vec()
}

/// Writes an encoded key's value as an index tuple stores it into `out`
/// (text and bytea: a varlena with a 4-byte header; uuid: its 16 bytes),
/// calling no PostgreSQL function; returns the bytes written. Decoding
/// never lengthens a key, so `out` of 4 + MAX_KEY bytes is enough.
pub fn decode_into(bytes: &[u8], kind: KeyKind, out: &mut [u8]) -> usize {
    let len = match kind {
        KeyKind::Uuid => {
            out[..16].copy_from_slice(bytes);
            return 16;
        }
        KeyKind::Text => {
            let s = &bytes[..bytes.len() - 1];
            out[4..4 + s.len()].copy_from_slice(s);
            s.len()
        }
        KeyKind::Bytea => {
            let (mut i, mut n) = (0, 0);
            while i < bytes.len() - 2 {
                out[4 + n] = bytes[i];
                n += 1;
                i += if bytes[i] == 0 { 2 } else { 1 };
            }
            n
        }
    };
    // SAFETY: out holds a 4-byte header (a bit operation, no call).
    unsafe { pgrx::set_varsize_4b(out.as_mut_ptr() as *mut pg_sys::varlena, (len + 4) as i32) };
    len + 4
}

/// The datum of an encoded key, allocated in the current memory context.
pub fn decode(bytes: &[u8], kind: KeyKind) -> Datum {
    // SAFETY: a buffer of 4 + len bytes, which decoding never exceeds.
    unsafe {
        let cap = 4 + bytes.len().max(16);
        let p = pg_sys::palloc(cap) as *mut u8;
        decode_into(bytes, kind, std::slice::from_raw_parts_mut(p, cap));
        Datum::from(p)
    }
}

pub use crate::arrays::elements as array_elements;
