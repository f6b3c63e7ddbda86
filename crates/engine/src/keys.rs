//! Order-preserving encodings of fixed-width keys as u64, so that every
//! structure compares plain unsigned integers on the CPU and the GPU alike.

/// Signed 64-bit to u64 with the same order: flip the sign bit.
#[inline(always)]
pub fn encode_i64(x: i64) -> u64 {
    (x as u64) ^ (1 << 63)
}

#[inline(always)]
pub fn decode_i64(k: u64) -> i64 {
    (k ^ (1 << 63)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i64_order_and_round_trip() {
        let xs = [i64::MIN, i64::MIN + 1, -2, -1, 0, 1, 2, i64::MAX - 1, i64::MAX];
        for w in xs.windows(2) {
            assert!(encode_i64(w[0]) < encode_i64(w[1]));
        }
        for x in xs {
            assert_eq!(decode_i64(encode_i64(x)), x);
        }
    }
}
