//! onnxruntime custom operators served from this same library. Python registers them with
//! `SessionOptions.register_custom_ops_library(<path of _core>)`; onnxruntime then dlopens the
//! library (already loaded: the same handle) and calls `RegisterCustomOps` below.
//!
//! Domain `ai.codecspec`, opset 1:
//! - `SnakeBeta(x [N, C, T], alpha [.., C, ..], inv_beta [.., C, ..]) -> y [N, C, T]`,
//!   `y = x + inv_beta · sin²(alpha · x)` per channel (`codecspec_core::snake`).
//! - `PlacedAttention(q [1, Q, heads·hd], new_kv [1, Q, 2·kv_heads·hd], past [1, P,
//!   2·kv_heads·hd], bias [Q, P + Q]) -> [1, Q, heads·hd]`, attributes `num_heads`,
//!   `kv_num_heads`: every row over the keys its bias row shows, computed alone
//!   (`codecspec_core::attention`).
//! - `RouteRows(hidden, draft_offsets, head_ids) -> (order, rows per head...)` and
//!   `MergeRows(order, head_ids, logits per head...) -> (logits, draft_logits)`, attributes
//!   `num_heads` (and `row_multiple`): a call's (row, offset) pairs gathered per LM head and
//!   the heads' logits put back in pair order (`codecspec_core::routing`).
//!
//! onnxruntime's C API is a table of function pointers that only ever grows: an entry keeps
//! its position in every later version. So the few entries used here are read at their fixed
//! positions from the table `GetApi(API_VERSION)` returns (null from a runtime older than that
//! version, and then nothing is registered). Only glue lives here; the arithmetic is the
//! core's.

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;

/// onnxruntime 1.17: the oldest API with every entry below (KernelContext_ParallelFor).
const API_VERSION: u32 = 17;
/// OrtCustomOp layout version: the V2 kernel entry points, nothing newer.
const CUSTOM_OP_VERSION: u32 = 16;
const DOMAIN: &std::ffi::CStr = c"ai.codecspec";
const ELEMENT_FLOAT: c_int = 1;
const ELEMENT_INT64: c_int = 7;
const ORT_INVALID_ARGUMENT: c_int = 2;
const ORT_FAIL: c_int = 1;

// Positions in the OrtApi table.
const CREATE_STATUS: usize = 0;
const CREATE_CUSTOM_OP_DOMAIN: usize = 26;
const CUSTOM_OP_DOMAIN_ADD: usize = 27;
const ADD_CUSTOM_OP_DOMAIN: usize = 28;
const GET_TENSOR_MUTABLE_DATA: usize = 51;
const KERNEL_INFO_GET_ATTRIBUTE_INT64: usize = 86;
const GET_DIMENSIONS_COUNT: usize = 61;
const GET_DIMENSIONS: usize = 62;
const GET_TENSOR_TYPE_AND_SHAPE: usize = 65;
const KERNEL_CONTEXT_GET_INPUT: usize = 90;
const KERNEL_CONTEXT_GET_OUTPUT: usize = 91;
const RELEASE_TENSOR_TYPE_AND_SHAPE_INFO: usize = 99;
const KERNEL_CONTEXT_PARALLEL_FOR: usize = 274;

type Status = *mut c_void; // OrtStatus*, null = OK
type Api = *const *const c_void; // the OrtApi table

#[repr(C)]
pub struct OrtApiBase {
    get_api: unsafe extern "C" fn(version: u32) -> Api,
    _get_version_string: unsafe extern "C" fn() -> *const c_char,
}

/// The OrtCustomOp struct, field for field (onnxruntime_c_api.h); version 16 reads up to
/// KernelComputeV2.
#[repr(C)]
struct OrtCustomOp {
    version: u32,
    create_kernel:
        Option<unsafe extern "C" fn(*const OrtCustomOp, Api, *const c_void) -> *mut c_void>,
    get_name: unsafe extern "C" fn(*const OrtCustomOp) -> *const c_char,
    get_execution_provider_type: unsafe extern "C" fn(*const OrtCustomOp) -> *const c_char,
    get_input_type: unsafe extern "C" fn(*const OrtCustomOp, usize) -> c_int,
    get_input_type_count: unsafe extern "C" fn(*const OrtCustomOp) -> usize,
    get_output_type: unsafe extern "C" fn(*const OrtCustomOp, usize) -> c_int,
    get_output_type_count: unsafe extern "C" fn(*const OrtCustomOp) -> usize,
    kernel_compute: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
    kernel_destroy: unsafe extern "C" fn(*mut c_void),
    get_input_characteristic: unsafe extern "C" fn(*const OrtCustomOp, usize) -> c_int,
    get_output_characteristic: unsafe extern "C" fn(*const OrtCustomOp, usize) -> c_int,
    get_input_memory_type: unsafe extern "C" fn(*const OrtCustomOp, usize) -> c_int,
    get_variadic_input_min_arity: unsafe extern "C" fn(*const OrtCustomOp) -> c_int,
    get_variadic_input_homogeneity: unsafe extern "C" fn(*const OrtCustomOp) -> c_int,
    get_variadic_output_min_arity: unsafe extern "C" fn(*const OrtCustomOp) -> c_int,
    get_variadic_output_homogeneity: unsafe extern "C" fn(*const OrtCustomOp) -> c_int,
    create_kernel_v2:
        unsafe extern "C" fn(*const OrtCustomOp, Api, *const c_void, *mut *mut c_void) -> Status,
    kernel_compute_v2: unsafe extern "C" fn(*mut c_void, *mut c_void) -> Status,
}

// SAFETY (both impls): the op is immutable after construction and only read by onnxruntime.
unsafe impl Sync for OrtCustomOp {}
unsafe impl Send for OrtCustomOp {}

/// The table entry at `index`, as the function type `F` the header gives it.
unsafe fn entry<F: Copy>(api: Api, index: usize) -> F {
    let f: *const c_void = *api.add(index);
    std::mem::transmute_copy(&f)
}

unsafe fn error(api: Api, code: c_int, msg: &str) -> Status {
    let create: unsafe extern "C" fn(c_int, *const c_char) -> Status = entry(api, CREATE_STATUS);
    let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    create(code, msg.as_ptr())
}

macro_rules! ort_try {
    ($e:expr) => {{
        let s: Status = $e;
        if !s.is_null() {
            return Err(s);
        }
    }};
}

/// Shape and data of a kernel input or output.
unsafe fn shape_of(api: Api, value: *const c_void) -> Result<Vec<i64>, Status> {
    type Get = unsafe extern "C" fn(*const c_void, *mut *mut c_void) -> Status;
    type Count = unsafe extern "C" fn(*const c_void, *mut usize) -> Status;
    type Dims = unsafe extern "C" fn(*const c_void, *mut i64, usize) -> Status;
    type Release = unsafe extern "C" fn(*mut c_void);
    let mut info: *mut c_void = ptr::null_mut();
    ort_try!(entry::<Get>(api, GET_TENSOR_TYPE_AND_SHAPE)(
        value, &mut info
    ));
    let mut n = 0usize;
    let mut dims = Vec::new();
    let mut status = entry::<Count>(api, GET_DIMENSIONS_COUNT)(info, &mut n);
    if status.is_null() {
        dims = vec![0i64; n];
        status = entry::<Dims>(api, GET_DIMENSIONS)(info, dims.as_mut_ptr(), n);
    }
    entry::<Release>(api, RELEASE_TENSOR_TYPE_AND_SHAPE_INFO)(info);
    if status.is_null() {
        Ok(dims)
    } else {
        Err(status)
    }
}

unsafe fn element_count(api: Api, value: *const c_void) -> Result<usize, Status> {
    Ok(shape_of(api, value)?
        .iter()
        .map(|&d| d.max(0) as usize)
        .product())
}

unsafe fn data_of(api: Api, value: *mut c_void) -> Result<*mut f32, Status> {
    type Data = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> Status;
    let mut p: *mut c_void = ptr::null_mut();
    ort_try!(entry::<Data>(api, GET_TENSOR_MUTABLE_DATA)(value, &mut p));
    Ok(p as *mut f32)
}

/// The kernel's first N inputs, each present.
unsafe fn kernel_inputs<const N: usize>(
    api: Api,
    ctx: *mut c_void,
    op: &str,
) -> Result<[*const c_void; N], Status> {
    type Input = unsafe extern "C" fn(*const c_void, usize, *mut *const c_void) -> Status;
    let mut inputs = [ptr::null::<c_void>(); N];
    for (i, v) in inputs.iter_mut().enumerate() {
        ort_try!(entry::<Input>(api, KERNEL_CONTEXT_GET_INPUT)(ctx, i, v));
        if v.is_null() {
            return Err(error(
                api,
                ORT_INVALID_ARGUMENT,
                &format!("{op}: input {i} is missing"),
            ));
        }
    }
    Ok(inputs)
}

/// Output 0 of the kernel, of shape `dims`.
unsafe fn kernel_output(api: Api, ctx: *mut c_void, dims: &[i64], out: *mut *mut c_void) -> Status {
    kernel_output_at(api, ctx, 0, dims, out)
}

/// Output `index` of the kernel, of shape `dims`.
unsafe fn kernel_output_at(
    api: Api,
    ctx: *mut c_void,
    index: usize,
    dims: &[i64],
    out: *mut *mut c_void,
) -> Status {
    type Output =
        unsafe extern "C" fn(*mut c_void, usize, *const i64, usize, *mut *mut c_void) -> Status;
    entry::<Output>(api, KERNEL_CONTEXT_GET_OUTPUT)(ctx, index, dims.as_ptr(), dims.len(), out)
}

/// A kernel's result as onnxruntime's status: a Rust panic becomes an error naming `op`, never
/// an unwind across the C boundary.
unsafe fn guarded(api: Api, op: &str, run: impl FnOnce() -> Result<(), Status>) -> Status {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(())) => ptr::null_mut(),
        Ok(Err(status)) => status,
        Err(_) => error(api, ORT_FAIL, &format!("{op}: internal error")),
    }
}

// ------------------------------------------------------------------------------ SnakeBeta
struct Kernel {
    api: Api,
}

/// One call's work, split into `chunks` runs of whole rows for onnxruntime's thread pool.
struct SnakeJob {
    x: *const f32,
    y: *mut f32,
    alpha: *const f32,
    inv_beta: *const f32,
    channels: usize,
    len: usize,
    rows: usize,
    chunks: usize,
}

unsafe extern "C" fn snake_chunk(job: *mut c_void, chunk: usize) {
    let j = &*(job as *const SnakeJob);
    let (lo, hi) = (chunk * j.rows / j.chunks, (chunk + 1) * j.rows / j.chunks);
    let alpha = std::slice::from_raw_parts(j.alpha, j.channels);
    let inv_beta = std::slice::from_raw_parts(j.inv_beta, j.channels);
    for r in lo..hi {
        let x = std::slice::from_raw_parts(j.x.add(r * j.len), j.len);
        let y = std::slice::from_raw_parts_mut(j.y.add(r * j.len), j.len);
        let c = r % j.channels;
        // lengths match by construction; the core only fails on mismatched lengths
        let _ = codecspec_core::snake_beta_row(x, alpha[c], inv_beta[c], y);
    }
}

unsafe fn snake_compute(api: Api, ctx: *mut c_void) -> Result<(), Status> {
    type ParallelFor = unsafe extern "C" fn(
        *const c_void,
        unsafe extern "C" fn(*mut c_void, usize),
        usize,
        usize,
        *mut c_void,
    ) -> Status;
    let inputs = kernel_inputs::<3>(api, ctx, "SnakeBeta")?;
    let dims = shape_of(api, inputs[0])?;
    let (channels, alpha_n, beta_n) = (
        if dims.len() == 3 {
            dims[1].max(0) as usize
        } else {
            0
        },
        element_count(api, inputs[1])?,
        element_count(api, inputs[2])?,
    );
    if dims.len() != 3 || alpha_n != channels || beta_n != channels {
        let msg = format!(
            "SnakeBeta: x must be [N, C, T] and alpha, inv_beta C values each; got x {dims:?}, \
             alpha {alpha_n} and inv_beta {beta_n} values"
        );
        return Err(error(api, ORT_INVALID_ARGUMENT, &msg));
    }
    let mut out: *mut c_void = ptr::null_mut();
    ort_try!(kernel_output(api, ctx, &dims, &mut out));
    let (len, rows) = (dims[2].max(0) as usize, dims[0].max(0) as usize * channels);
    if rows == 0 || len == 0 {
        return Ok(());
    }
    let mut job = SnakeJob {
        x: data_of(api, inputs[0] as *mut c_void)?,
        y: data_of(api, out)?,
        alpha: data_of(api, inputs[1] as *mut c_void)?,
        inv_beta: data_of(api, inputs[2] as *mut c_void)?,
        channels,
        len,
        rows,
        // a few chunks per core at most, and none under ~16k values (a task costs µs)
        chunks: rows.min((rows * len / 16_384).clamp(1, 64)),
    };
    let run: ParallelFor = entry(api, KERNEL_CONTEXT_PARALLEL_FOR);
    let job_ptr = &mut job as *mut SnakeJob as *mut c_void;
    ort_try!(run(ctx, snake_chunk, job.chunks, 0, job_ptr));
    Ok(())
}

unsafe extern "C" fn snake_create(
    _op: *const OrtCustomOp,
    api: Api,
    _info: *const c_void,
    kernel: *mut *mut c_void,
) -> Status {
    *kernel = Box::into_raw(Box::new(Kernel { api })) as *mut c_void;
    ptr::null_mut()
}

unsafe extern "C" fn snake_compute_v2(kernel: *mut c_void, ctx: *mut c_void) -> Status {
    let api = (*(kernel as *const Kernel)).api;
    guarded(api, "SnakeBeta", || snake_compute(api, ctx))
}

unsafe extern "C" fn snake_destroy(kernel: *mut c_void) {
    if !kernel.is_null() {
        drop(Box::from_raw(kernel as *mut Kernel));
    }
}

unsafe extern "C" fn snake_name(_: *const OrtCustomOp) -> *const c_char {
    c"SnakeBeta".as_ptr()
}
unsafe extern "C" fn cpu_provider(_: *const OrtCustomOp) -> *const c_char {
    c"CPUExecutionProvider".as_ptr()
}
unsafe extern "C" fn float_type(_: *const OrtCustomOp, _: usize) -> c_int {
    ELEMENT_FLOAT
}
unsafe extern "C" fn three(_: *const OrtCustomOp) -> usize {
    3
}
unsafe extern "C" fn one(_: *const OrtCustomOp) -> usize {
    1
}
unsafe extern "C" fn required(_: *const OrtCustomOp, _: usize) -> c_int {
    0 // INPUT_OUTPUT_REQUIRED
}
unsafe extern "C" fn default_memory(_: *const OrtCustomOp, _: usize) -> c_int {
    0 // OrtMemTypeDefault
}
unsafe extern "C" fn arity_one(_: *const OrtCustomOp) -> c_int {
    1
}

// ------------------------------------------------------------------------ PlacedAttention
struct AttentionKernel {
    api: Api,
    heads: usize,
    kv_heads: usize,
}

unsafe fn int_attribute(
    api: Api,
    info: *const c_void,
    name: &std::ffi::CStr,
) -> Result<i64, Status> {
    type Get = unsafe extern "C" fn(*const c_void, *const c_char, *mut i64) -> Status;
    let mut v = 0i64;
    ort_try!(entry::<Get>(api, KERNEL_INFO_GET_ATTRIBUTE_INT64)(
        info,
        name.as_ptr(),
        &mut v
    ));
    Ok(v)
}

unsafe extern "C" fn attention_create(
    _op: *const OrtCustomOp,
    api: Api,
    info: *const c_void,
    kernel: *mut *mut c_void,
) -> Status {
    let heads = match (
        int_attribute(api, info, c"num_heads"),
        int_attribute(api, info, c"kv_num_heads"),
    ) {
        (Ok(h), Ok(k)) if h > 0 && k > 0 && h % k == 0 => (h as usize, k as usize),
        (Err(s), _) | (_, Err(s)) => return s,
        _ => {
            return error(
                api,
                ORT_INVALID_ARGUMENT,
                "PlacedAttention: num_heads must be a positive multiple of kv_num_heads",
            )
        }
    };
    let k = AttentionKernel {
        api,
        heads: heads.0,
        kv_heads: heads.1,
    };
    *kernel = Box::into_raw(Box::new(k)) as *mut c_void;
    ptr::null_mut()
}

unsafe fn attention_compute(k: &AttentionKernel, ctx: *mut c_void) -> Result<(), Status> {
    let api = k.api;
    let inputs = kernel_inputs::<4>(api, ctx, "PlacedAttention")?;
    let (qd, kvd, pd, bd) = (
        shape_of(api, inputs[0])?,
        shape_of(api, inputs[1])?,
        shape_of(api, inputs[2])?,
        shape_of(api, inputs[3])?,
    );
    let bad = || {
        let msg = format!(
            "PlacedAttention: expected q [1, Q, {h}·hd], new_kv [1, Q, 2·{kv}·hd], past [1, P, \
             2·{kv}·hd], bias [Q, P + Q]; got {qd:?}, {kvd:?}, {pd:?}, {bd:?}",
            h = k.heads,
            kv = k.kv_heads
        );
        error(api, ORT_INVALID_ARGUMENT, &msg)
    };
    if qd.len() != 3
        || kvd.len() != 3
        || pd.len() != 3
        || bd.len() != 2
        || qd[2] % k.heads as i64 != 0
    {
        return Err(bad());
    }
    let hd = (qd[2] / k.heads as i64) as usize;
    let (rows, past) = (qd[1].max(0) as usize, pd[1].max(0) as usize);
    let shape = codecspec_core::AttentionShape {
        rows,
        past,
        heads: k.heads,
        kv_heads: k.kv_heads,
        head_dim: hd,
    };
    let wkv = (2 * k.kv_heads * hd) as i64;
    if qd[0] != 1
        || kvd != [1, rows as i64, wkv]
        || pd[0] != 1
        || pd[2] != wkv
        || bd != [rows as i64, (past + rows) as i64]
    {
        return Err(bad());
    }
    let mut out: *mut c_void = ptr::null_mut();
    ort_try!(kernel_output(api, ctx, &qd, &mut out));
    let view = |p: *mut f32, n: usize| {
        if n == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(p as *const f32, n)
        }
    };
    let (wq, wkv) = (k.heads * hd, wkv as usize);
    let q = view(data_of(api, inputs[0] as *mut c_void)?, rows * wq);
    let new_kv = view(data_of(api, inputs[1] as *mut c_void)?, rows * wkv);
    let past_kv = view(data_of(api, inputs[2] as *mut c_void)?, past * wkv);
    let bias = view(
        data_of(api, inputs[3] as *mut c_void)?,
        rows * (past + rows),
    );
    if rows * wq == 0 {
        return Ok(());
    }
    let y = std::slice::from_raw_parts_mut(data_of(api, out)?, rows * wq);
    codecspec_core::placed_attention(q, new_kv, past_kv, bias, shape, y)
        .map_err(|e| error(api, ORT_INVALID_ARGUMENT, &format!("PlacedAttention: {e}")))
}

unsafe extern "C" fn attention_compute_v2(kernel: *mut c_void, ctx: *mut c_void) -> Status {
    let k = &*(kernel as *const AttentionKernel);
    guarded(k.api, "PlacedAttention", || attention_compute(k, ctx))
}

unsafe extern "C" fn attention_destroy(kernel: *mut c_void) {
    if !kernel.is_null() {
        drop(Box::from_raw(kernel as *mut AttentionKernel));
    }
}

unsafe extern "C" fn attention_name(_: *const OrtCustomOp) -> *const c_char {
    c"PlacedAttention".as_ptr()
}
unsafe extern "C" fn four(_: *const OrtCustomOp) -> usize {
    4
}

// ------------------------------------------------------------------ RouteRows / MergeRows
/// `RouteRows(hidden [Q, H], draft_offsets [K, H], head_ids [Q] int64) -> (order [P] int64,
/// rows_0 [n_0, H], ..., rows_{G-1})` and `MergeRows(order, head_ids, logits_0 [n_0, V], ...,
/// logits_{G-1}) -> (logits [Q, V], draft_logits [Q, K, V])`, attribute `num_heads` = G
/// (RouteRows also `row_multiple`): the rows of a call gathered per LM head and the heads'
/// logits put back in pair order; a head id of -1 marks a padding row that no head scores
/// (`codecspec_core::routing`).
struct RoutingKernel {
    api: Api,
    heads: usize,
    /// RouteRows: each head's rows rounded up to a multiple of this (`codecspec_core::routing`)
    multiple: usize,
}

unsafe fn routing_kernel(
    api: Api,
    info: *const c_void,
    multiple: Option<&std::ffi::CStr>,
    kernel: *mut *mut c_void,
) -> Status {
    let heads = match int_attribute(api, info, c"num_heads") {
        Ok(h) if (1..=4096).contains(&h) => h as usize,
        Ok(h) => {
            let msg = format!("RouteRows/MergeRows: num_heads must be in 1..=4096, got {h}");
            return error(api, ORT_INVALID_ARGUMENT, &msg);
        }
        Err(s) => return s,
    };
    let multiple = match multiple.map(|name| int_attribute(api, info, name)) {
        None => 1,
        Some(Ok(m)) if (1..=64).contains(&m) => m as usize,
        Some(Ok(m)) => {
            let msg = format!("RouteRows: row_multiple must be in 1..=64, got {m}");
            return error(api, ORT_INVALID_ARGUMENT, &msg);
        }
        Some(Err(s)) => return s,
    };
    let k = RoutingKernel {
        api,
        heads,
        multiple,
    };
    *kernel = Box::into_raw(Box::new(k)) as *mut c_void;
    ptr::null_mut()
}

unsafe extern "C" fn route_create(
    _op: *const OrtCustomOp,
    api: Api,
    info: *const c_void,
    kernel: *mut *mut c_void,
) -> Status {
    routing_kernel(api, info, Some(c"row_multiple"), kernel)
}

unsafe extern "C" fn merge_create(
    _op: *const OrtCustomOp,
    api: Api,
    info: *const c_void,
    kernel: *mut *mut c_void,
) -> Status {
    routing_kernel(api, info, None, kernel)
}

unsafe extern "C" fn routing_destroy(kernel: *mut c_void) {
    if !kernel.is_null() {
        drop(Box::from_raw(kernel as *mut RoutingKernel));
    }
}

/// Input `index` of the kernel, present.
unsafe fn kernel_input(
    api: Api,
    ctx: *mut c_void,
    index: usize,
    op: &str,
) -> Result<*const c_void, Status> {
    type Input = unsafe extern "C" fn(*const c_void, usize, *mut *const c_void) -> Status;
    let mut v = ptr::null::<c_void>();
    ort_try!(entry::<Input>(api, KERNEL_CONTEXT_GET_INPUT)(
        ctx, index, &mut v
    ));
    if v.is_null() {
        let msg = format!("{op}: input {index} is missing");
        return Err(error(api, ORT_INVALID_ARGUMENT, &msg));
    }
    Ok(v)
}

/// `n` values of type `T` at a tensor's data (an empty slice for none: an empty tensor's
/// pointer may be null).
unsafe fn values<'a, T>(api: Api, value: *const c_void, n: usize) -> Result<&'a mut [T], Status> {
    if n == 0 {
        return Ok(&mut []);
    }
    Ok(std::slice::from_raw_parts_mut(
        data_of(api, value as *mut c_void)? as *mut T,
        n,
    ))
}

/// A new output `index` of shape `dims`, as values of type `T`.
unsafe fn new_output<'a, T>(
    api: Api,
    ctx: *mut c_void,
    index: usize,
    dims: &[i64],
) -> Result<&'a mut [T], Status> {
    let mut out: *mut c_void = ptr::null_mut();
    ort_try!(kernel_output_at(api, ctx, index, dims, &mut out));
    values(api, out, dims.iter().map(|&d| d.max(0) as usize).product())
}

unsafe fn route_compute(k: &RoutingKernel, ctx: *mut c_void) -> Result<(), Status> {
    let api = k.api;
    let [x, offs, ids] = kernel_inputs::<3>(api, ctx, "RouteRows")?;
    let (xd, od, idd) = (shape_of(api, x)?, shape_of(api, offs)?, shape_of(api, ids)?);
    if xd.len() != 2 || od.len() != 2 || od[1] != xd[1] || idd != [xd[0]] {
        let msg = format!(
            "RouteRows: expected hidden [Q, H], draft_offsets [K, H], head_ids [Q]; got \
             {xd:?}, {od:?}, {idd:?}"
        );
        return Err(error(api, ORT_INVALID_ARGUMENT, &msg));
    }
    let (q, h, nk) = (xd[0] as usize, xd[1] as usize, od[0] as usize);
    let head_ids = values::<i64>(api, ids, q)?;
    let fail =
        |e: codecspec_core::Error| error(api, ORT_INVALID_ARGUMENT, &format!("RouteRows: {e}"));
    let ph = codecspec_core::pair_heads(head_ids, nk, k.heads).map_err(fail)?;
    let order = new_output::<i64>(api, ctx, 0, &[ph.len() as i64])?;
    let mut outs = Vec::with_capacity(k.heads);
    for (i, n) in codecspec_core::rows_per_head(&ph, k.heads, k.multiple)
        .into_iter()
        .enumerate()
    {
        outs.push(new_output::<f32>(api, ctx, 1 + i, &[n as i64, h as i64])?);
    }
    let hidden = values::<f32>(api, x, q * h)?;
    let offsets = values::<f32>(api, offs, nk * h)?;
    codecspec_core::route_rows(hidden, offsets, &ph, h, &mut outs, order).map_err(fail)
}

unsafe fn merge_compute(k: &RoutingKernel, ctx: *mut c_void) -> Result<(), Status> {
    let api = k.api;
    let [ord, ids] = kernel_inputs::<2>(api, ctx, "MergeRows")?;
    let (od, idd) = (shape_of(api, ord)?, shape_of(api, ids)?);
    let mut sources = Vec::with_capacity(k.heads);
    let mut vocab = None;
    for i in 0..k.heads {
        let v = kernel_input(api, ctx, 2 + i, "MergeRows")?;
        let d = shape_of(api, v)?;
        if d.len() != 2 || vocab.is_some_and(|w| w != d[1]) || d[1] <= 0 {
            let msg = format!(
                "MergeRows: head {i}'s logits must be [rows, V] like the others, got {d:?}"
            );
            return Err(error(api, ORT_INVALID_ARGUMENT, &msg));
        }
        vocab = Some(d[1]);
        sources.push(&*values::<f32>(api, v, (d[0].max(0) * d[1]) as usize)?);
    }
    let v = vocab.unwrap_or(1) as usize;
    let (p, q) = (
        od.first().copied().unwrap_or(-1),
        idd.first().copied().unwrap_or(-1),
    );
    if od.len() != 1 || idd.len() != 1 || (q == 0 && p != 0) || (q > 0 && (p % q != 0 || p < q)) {
        let msg = format!(
            "MergeRows: order [P] must hold whole rows of head_ids [Q]; got {od:?}, {idd:?}"
        );
        return Err(error(api, ORT_INVALID_ARGUMENT, &msg));
    }
    let (p, q) = (p as usize, q as usize);
    let drafts_per_row = p.checked_div(q).map_or(0, |c| c - 1);
    let logits = new_output::<f32>(api, ctx, 0, &[q as i64, v as i64])?;
    let drafts = new_output::<f32>(api, ctx, 1, &[q as i64, drafts_per_row as i64, v as i64])?;
    if q == 0 {
        return Ok(());
    }
    let order = values::<i64>(api, ord, p)?;
    codecspec_core::merge_rows(order, &sources, v, logits, drafts)
        .map_err(|e| error(api, ORT_INVALID_ARGUMENT, &format!("MergeRows: {e}")))
}

unsafe extern "C" fn route_compute_v2(kernel: *mut c_void, ctx: *mut c_void) -> Status {
    let k = &*(kernel as *const RoutingKernel);
    guarded(k.api, "RouteRows", || route_compute(k, ctx))
}

unsafe extern "C" fn merge_compute_v2(kernel: *mut c_void, ctx: *mut c_void) -> Status {
    let k = &*(kernel as *const RoutingKernel);
    guarded(k.api, "MergeRows", || merge_compute(k, ctx))
}

unsafe extern "C" fn route_name(_: *const OrtCustomOp) -> *const c_char {
    c"RouteRows".as_ptr()
}
unsafe extern "C" fn merge_name(_: *const OrtCustomOp) -> *const c_char {
    c"MergeRows".as_ptr()
}
unsafe extern "C" fn two(_: *const OrtCustomOp) -> usize {
    2
}
const VARIADIC: c_int = 2; // INPUT_OUTPUT_VARIADIC: the last input or output, any count >= 1
unsafe extern "C" fn route_input_type(_: *const OrtCustomOp, i: usize) -> c_int {
    if i == 2 {
        ELEMENT_INT64
    } else {
        ELEMENT_FLOAT
    }
}
unsafe extern "C" fn route_output_type(_: *const OrtCustomOp, i: usize) -> c_int {
    if i == 0 {
        ELEMENT_INT64
    } else {
        ELEMENT_FLOAT
    }
}
unsafe extern "C" fn merge_input_type(_: *const OrtCustomOp, i: usize) -> c_int {
    if i < 2 {
        ELEMENT_INT64
    } else {
        ELEMENT_FLOAT
    }
}
unsafe extern "C" fn second_variadic(_: *const OrtCustomOp, i: usize) -> c_int {
    if i == 1 {
        VARIADIC
    } else {
        0
    }
}
unsafe extern "C" fn third_variadic(_: *const OrtCustomOp, i: usize) -> c_int {
    if i == 2 {
        VARIADIC
    } else {
        0
    }
}

type Create =
    unsafe extern "C" fn(*const OrtCustomOp, Api, *const c_void, *mut *mut c_void) -> Status;
type Compute = unsafe extern "C" fn(*mut c_void, *mut c_void) -> Status;

/// A CPU operator of float32 inputs and one float32 output, every input required.
const fn float_op(
    name: unsafe extern "C" fn(*const OrtCustomOp) -> *const c_char,
    inputs: unsafe extern "C" fn(*const OrtCustomOp) -> usize,
    create: Create,
    compute: Compute,
    destroy: unsafe extern "C" fn(*mut c_void),
) -> OrtCustomOp {
    OrtCustomOp {
        version: CUSTOM_OP_VERSION,
        create_kernel: None,
        get_name: name,
        get_execution_provider_type: cpu_provider,
        get_input_type: float_type,
        get_input_type_count: inputs,
        get_output_type: float_type,
        get_output_type_count: one,
        kernel_compute: None,
        kernel_destroy: destroy,
        get_input_characteristic: required,
        get_output_characteristic: required,
        get_input_memory_type: default_memory,
        get_variadic_input_min_arity: arity_one,
        get_variadic_input_homogeneity: arity_one,
        get_variadic_output_min_arity: arity_one,
        get_variadic_output_homogeneity: arity_one,
        create_kernel_v2: create,
        kernel_compute_v2: compute,
    }
}

static PLACED_ATTENTION: OrtCustomOp = float_op(
    attention_name,
    four,
    attention_create,
    attention_compute_v2,
    attention_destroy,
);
static SNAKE_BETA: OrtCustomOp = float_op(
    snake_name,
    three,
    snake_create,
    snake_compute_v2,
    snake_destroy,
);

static ROUTE_ROWS: OrtCustomOp = OrtCustomOp {
    get_input_type: route_input_type,
    get_output_type: route_output_type,
    get_output_type_count: two,
    get_output_characteristic: second_variadic,
    ..float_op(
        route_name,
        three,
        route_create,
        route_compute_v2,
        routing_destroy,
    )
};
static MERGE_ROWS: OrtCustomOp = OrtCustomOp {
    get_input_type: merge_input_type,
    get_input_characteristic: third_variadic,
    get_output_type_count: two,
    ..float_op(
        merge_name,
        three,
        merge_create,
        merge_compute_v2,
        routing_destroy,
    )
};

/// onnxruntime's entry point for a custom-op library: adds domain `ai.codecspec` to the
/// session options. The domain object is leaked on purpose: it must outlive every session
/// made from those options, and there is one per registration.
///
/// # Safety
/// Called by onnxruntime with its own session options and API base.
#[no_mangle]
pub unsafe extern "C" fn RegisterCustomOps(
    options: *mut c_void,
    base: *const OrtApiBase,
) -> Status {
    if base.is_null() {
        return ptr::null_mut();
    }
    let api = ((*base).get_api)(API_VERSION);
    if api.is_null() {
        return ptr::null_mut(); // an older runtime: nothing registered, the op stays unknown
    }
    type Create = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> Status;
    type Add = unsafe extern "C" fn(*mut c_void, *const OrtCustomOp) -> Status;
    type AddDomain = unsafe extern "C" fn(*mut c_void, *mut c_void) -> Status;
    let mut domain: *mut c_void = ptr::null_mut();
    let s = entry::<Create>(api, CREATE_CUSTOM_OP_DOMAIN)(DOMAIN.as_ptr(), &mut domain);
    if !s.is_null() {
        return s;
    }
    for op in [&SNAKE_BETA, &PLACED_ATTENTION, &ROUTE_ROWS, &MERGE_ROWS] {
        let s = entry::<Add>(api, CUSTOM_OP_DOMAIN_ADD)(domain, op);
        if !s.is_null() {
            return s;
        }
    }
    entry::<AddDomain>(api, ADD_CUSTOM_OP_DOMAIN)(options, domain)
}
