//! The KV commit step on a host-owned, fixed-capacity cache.
//!
//! The cache is viewed as [outer, capacity, inner] (outer = the product of the leading dims,
//! e.g. layers × 2 × heads; inner = head_dim). After a verify call, the accepted path's rows
//! are moved to the end of the committed prefix: row past_len + j receives node nodes[j].
//! Generic over the element type (f32, f16, ...): rows are copied, never interpreted.

use rayon::prelude::*;

use crate::error::{ensure, Error, Result};

/// Copies larger than this many bytes are split over `outer` with rayon.
const PAR_BYTES: usize = 1 << 20;

fn check_cache(len: usize, outer: usize, capacity: usize, inner: usize) -> Result<()> {
    let want = outer
        .checked_mul(capacity)
        .and_then(|x| x.checked_mul(inner));
    ensure(want == Some(len), "cache", || {
        format!("expected {outer} × {capacity} × {inner} values, got {len}")
    })
}

/// nodes: >= 0, strictly increasing, each < `limit`; and past_len + n <= capacity.
fn check_nodes(
    nodes: &[i32],
    limit: usize,
    what: &str,
    past_len: usize,
    capacity: usize,
) -> Result<()> {
    ensure(past_len <= capacity, "past_len", || {
        format!("{past_len} exceeds the cache capacity {capacity}")
    })?;
    ensure(past_len + nodes.len() <= capacity, "nodes", || {
        format!(
            "committing {} rows after past_len {past_len} overflows the cache capacity {capacity}",
            nodes.len()
        )
    })?;
    for (j, &x) in nodes.iter().enumerate() {
        ensure(x >= 0 && (x as usize) < limit, "nodes", || {
            format!("nodes[{j}] = {x} is outside [0, {limit}) ({what})")
        })?;
        if j > 0 && x <= nodes[j - 1] {
            return Err(Error::new(
                "nodes",
                format!(
                    "must be strictly increasing: nodes[{}] = {} then nodes[{j}] = {x}",
                    j - 1,
                    nodes[j - 1]
                ),
            ));
        }
    }
    Ok(())
}

/// The verify call's rows already sit at cache[o, past_len + i] for node i; moves row
/// past_len + nodes[j] to past_len + j for every j (ascending j never overwrites an unread
/// source, since nodes[j] >= j). Returns the new length past_len + nodes.len().
pub fn kv_commit_inplace<T: Copy + Send + Sync>(
    cache: &mut [T],
    outer: usize,
    capacity: usize,
    inner: usize,
    past_len: usize,
    nodes: &[i32],
) -> Result<usize> {
    check_cache(cache.len(), outer, capacity, inner)?;
    let limit = capacity.saturating_sub(past_len);
    check_nodes(
        nodes,
        limit,
        "rows past past_len in the cache",
        past_len,
        capacity,
    )?;
    let n = nodes.len();
    if n == 0 || outer == 0 || inner == 0 || nodes.iter().enumerate().all(|(j, &x)| x as usize == j)
    {
        return Ok(past_len + n);
    }
    let one = |plane: &mut [T]| {
        for (j, &x) in nodes.iter().enumerate() {
            let (src, dst) = ((past_len + x as usize) * inner, (past_len + j) * inner);
            if src != dst {
                plane.copy_within(src..src + inner, dst);
            }
        }
    };
    let plane = capacity * inner;
    if outer > 1 && outer * n * inner * std::mem::size_of::<T>() >= PAR_BYTES {
        cache.par_chunks_exact_mut(plane).for_each(one);
    } else {
        cache.chunks_exact_mut(plane).for_each(one);
    }
    Ok(past_len + n)
}

/// `rows` [outer, t, inner] holds the verify call's new rows (node i at index i):
/// cache[o, past_len + j] = rows[o, nodes[j]]. Returns past_len + nodes.len().
#[allow(clippy::too_many_arguments)]
pub fn kv_commit_rows<T: Copy + Send + Sync>(
    cache: &mut [T],
    outer: usize,
    capacity: usize,
    inner: usize,
    past_len: usize,
    rows: &[T],
    t: usize,
    nodes: &[i32],
) -> Result<usize> {
    check_cache(cache.len(), outer, capacity, inner)?;
    let want = outer.checked_mul(t).and_then(|x| x.checked_mul(inner));
    ensure(want == Some(rows.len()), "rows", || {
        format!(
            "expected {outer} × {t} × {inner} values (leading dims and head size of the cache), got {}",
            rows.len()
        )
    })?;
    check_nodes(nodes, t, "rows of `rows`", past_len, capacity)?;
    let n = nodes.len();
    if n == 0 || outer == 0 || inner == 0 {
        return Ok(past_len + n);
    }
    let one = |(plane, src): (&mut [T], &[T])| {
        for (j, &x) in nodes.iter().enumerate() {
            let (s, d) = (x as usize * inner, (past_len + j) * inner);
            plane[d..d + inner].copy_from_slice(&src[s..s + inner]);
        }
    };
    let (plane, src) = (capacity * inner, t * inner);
    if outer > 1 && outer * n * inner * std::mem::size_of::<T>() >= PAR_BYTES {
        cache
            .par_chunks_exact_mut(plane)
            .zip(rows.par_chunks_exact(src))
            .for_each(one);
    } else {
        cache
            .chunks_exact_mut(plane)
            .zip(rows.chunks_exact(src))
            .for_each(one);
    }
    Ok(past_len + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cache[o, r, i] = 1000·o + 10·r + i (distinct values everywhere).
    fn cache(outer: usize, cap: usize, inner: usize) -> Vec<u32> {
        (0..outer * cap * inner)
            .map(|x| {
                let (o, r, i) = (x / (cap * inner), (x / inner) % cap, x % inner);
                (1000 * o + 10 * r + i) as u32
            })
            .collect()
    }

    #[test]
    fn inplace_moves_rows() {
        let (outer, cap, inner) = (3, 12, 2);
        let mut c = cache(outer, cap, inner);
        let orig = c.clone();
        let n = kv_commit_inplace(&mut c, outer, cap, inner, 4, &[0, 2, 3, 7]).unwrap();
        assert_eq!(n, 8);
        for o in 0..outer {
            let at =
                |v: &[u32], r: usize| v[(o * cap + r) * inner..(o * cap + r + 1) * inner].to_vec();
            for r in 0..4 {
                assert_eq!(at(&c, r), at(&orig, r)); // committed prefix untouched
            }
            for (j, src) in [4, 6, 7, 11].into_iter().enumerate() {
                assert_eq!(at(&c, 4 + j), at(&orig, src));
            }
        }
    }

    #[test]
    fn inplace_equals_rows_variant() {
        for &(outer, cap, inner, past) in &[(2, 16, 3, 5), (40, 64, 2048, 32), (1, 8, 1, 0)] {
            let t = cap - past;
            let base = cache(outer, cap, inner);
            // rows[o, i] = base[o, past + i]
            let rows: Vec<u32> = (0..outer)
                .flat_map(|o| base[(o * cap + past) * inner..(o * cap + cap) * inner].to_vec())
                .collect();
            let nodes: Vec<i32> = (0..t as i32).filter(|x| x % 3 != 1).take(6).collect();
            let mut a = base.clone();
            let mut b = base.clone();
            let na = kv_commit_inplace(&mut a, outer, cap, inner, past, &nodes).unwrap();
            let nb = kv_commit_rows(&mut b, outer, cap, inner, past, &rows, t, &nodes).unwrap();
            assert_eq!(na, nb);
            // Rows up to the new length agree (past that, inplace keeps stale tree rows).
            for o in 0..outer {
                let r = (o * cap) * inner..(o * cap + na) * inner;
                assert_eq!(a[r.clone()], b[r]);
            }
        }
    }

    #[test]
    fn half_precision_bits_are_copied() {
        let mut c: Vec<u16> = (0..2 * 4 * 2).map(|x| x as u16).collect();
        let rows: Vec<u16> = (100..100 + 2 * 3 * 2).collect();
        assert_eq!(
            kv_commit_rows(&mut c, 2, 4, 2, 1, &rows, 3, &[0, 2]).unwrap(),
            3
        );
        assert_eq!(&c[..8], &[0, 1, 100, 101, 104, 105, 6, 7]);
        assert_eq!(&c[8..], &[8, 9, 106, 107, 110, 111, 14, 15]);
    }

    #[test]
    fn errors_name_the_argument() {
        let mut c = cache(2, 8, 2);
        let e = |r: Result<usize>| r.unwrap_err().arg;
        assert_eq!(e(kv_commit_inplace(&mut c, 2, 9, 2, 0, &[0])), "cache");
        assert_eq!(e(kv_commit_inplace(&mut c, 2, 8, 2, 9, &[])), "past_len");
        assert_eq!(
            e(kv_commit_inplace(&mut c, 2, 8, 2, 6, &[0, 1, 2])),
            "nodes"
        );
        assert_eq!(e(kv_commit_inplace(&mut c, 2, 8, 2, 6, &[2])), "nodes");
        assert_eq!(
            e(kv_commit_inplace(&mut c, 2, 8, 2, 0, &[0, 2, 2])),
            "nodes"
        );
        assert_eq!(e(kv_commit_inplace(&mut c, 2, 8, 2, 0, &[1, 0])), "nodes");
        assert_eq!(e(kv_commit_inplace(&mut c, 2, 8, 2, 0, &[-1])), "nodes");
        let rows = vec![0u32; 2 * 3 * 2];
        assert_eq!(
            e(kv_commit_rows(&mut c, 2, 8, 2, 0, &rows, 4, &[0])),
            "rows"
        );
        assert_eq!(
            e(kv_commit_rows(&mut c, 2, 8, 2, 0, &rows, 3, &[3])),
            "nodes"
        );
        assert_eq!(
            kv_commit_rows(&mut c, 2, 8, 2, 8, &rows, 3, &[]).unwrap(),
            8
        );
        assert_eq!(c, cache(2, 8, 2), "failed calls change nothing");
    }
}
