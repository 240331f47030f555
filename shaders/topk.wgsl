// topk.wgsl — cosine top-k: Q queries against N stored unit vectors (memory store scan).
//
// Computes, for every query q < Q (D floats each) against stored (N, D), whose rows are
// already L2-normalised:
//   score[q, i]  = dot(query[q] / max(||query[q]||, eps), stored[i])
//   out_index[q] = the k indices i with the highest scores, best first; equal scores are
//                  ordered by lower index (a strict total order, so the result is unique)
//   out_score[q] = their scores
// in three entry points, recorded by the launcher as one list of dispatches:
//   normalize_query  qnorm[q] = query[q] / max(||query[q]||, eps)
//   select_first     scores one chunk of WG stored rows per workgroup and keeps its top k
//   select_merge     keeps the top k of each chunk of WG candidates of the previous round
// Each round shrinks a query's candidate list from n to ceil(n / WG) * k; the launcher
// repeats select_merge until one chunk is left, whose top k is the answer.
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 query      storage read        Q*D f32
//   1 stored     storage read        N*D f32
//   2 qnorm      storage read_write  Q*D f32 (normalised queries)
//   3 in_score   storage read        Q*n f32 (previous round's candidates)
//   4 in_index   storage read        Q*n u32
//   5 out_score  storage read_write  Q*out_stride f32
//   6 out_index  storage read_write  Q*out_stride u32
//   7 params     uniform             Params
// Dispatch: normalize_query — (Q, 1, 1) workgroups; select_first / select_merge —
// (ceil(n / WG), Q, 1): wid.x is the chunk, wid.y the query.
// Selection: a chunk's WG candidates go to workgroup memory; each invocation counts how
// many candidates beat its own (rank) and writes it to slot rank when rank < k. Ranks are
// distinct, so the output is sorted and race-free; there is no reduction order to vary, so
// the result is bitwise deterministic. Chunk slots with no candidate hold the sentinel
// (score -FLT_MAX, index 0xFFFFFFFF), which loses to every real candidate.
// Numerical hazards: a NaN score breaks the total order (stored vectors must be finite);
// the query norm is computed with max-abs scaling so it neither overflows nor underflows.

struct Params {
    queries: u32,
    n: u32,           // candidates per query in this round's input (N in select_first)
    dim: u32,
    k: u32,
    out_stride: u32,  // candidates per query in this round's output
    eps: f32,
}

@group(0) @binding(0) var<storage, read> query: array<f32>;
@group(0) @binding(1) var<storage, read> stored: array<f32>;
@group(0) @binding(2) var<storage, read_write> qnorm: array<f32>;
@group(0) @binding(3) var<storage, read> in_score: array<f32>;
@group(0) @binding(4) var<storage, read> in_index: array<u32>;
@group(0) @binding(5) var<storage, read_write> out_score: array<f32>;
@group(0) @binding(6) var<storage, read_write> out_index: array<u32>;
@group(0) @binding(7) var<uniform> params: Params;

override WG: u32 = 256;

// -FLT_MAX. Not written -3.4028235e38: that decimal lies just outside the f32 range before
// rounding and Tint (Chrome) rejects it; -3.4028234e38 rounds to -FLT_MAX.
const LOWEST: f32 = -3.4028234e38;
const NO_INDEX: u32 = 0xFFFFFFFFu;

var<workgroup> chunk_score: array<f32, WG>;
var<workgroup> chunk_index: array<u32, WG>;

// Tree reduction over chunk_score (reused as scratch) with max or +; all invocations get
// the result. Call from uniform control flow.
fn reduce(lid: u32, value: f32, use_max: bool) -> f32 {
    workgroupBarrier();
    chunk_score[lid] = value;
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        workgroupBarrier();
        if (lid < stride) {
            let other = chunk_score[lid + stride];
            if (use_max) {
                chunk_score[lid] = max(chunk_score[lid], other);
            } else {
                chunk_score[lid] = chunk_score[lid] + other;
            }
        }
    }
    workgroupBarrier();
    return chunk_score[0];
}

@compute @workgroup_size(WG)
fn normalize_query(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(local_invocation_id) lid3: vec3<u32>) {
    let q = wid.x;
    if (q >= params.queries) {
        return;  // uniform across the workgroup
    }
    let lid = lid3.x;
    let base = q * params.dim;
    var local_max = 0.0;
    for (var d = lid; d < params.dim; d += WG) {
        local_max = max(local_max, abs(query[base + d]));
    }
    let scale = reduce(lid, local_max, true);
    let inv_scale = select(0.0, 1.0 / scale, scale > 0.0);
    var local_sq = 0.0;
    for (var d = lid; d < params.dim; d += WG) {
        let x = query[base + d] * inv_scale;
        local_sq += x * x;
    }
    let norm = scale * sqrt(reduce(lid, local_sq, false));
    let inv_norm = 1.0 / max(norm, params.eps);
    for (var d = lid; d < params.dim; d += WG) {
        qnorm[base + d] = query[base + d] * inv_norm;
    }
}

// Does candidate j come before candidate i (at slot i_slot)? Higher score first, then
// lower index, then lower slot — the last only separates sentinel padding, which repeats
// (LOWEST, NO_INDEX); without it two sentinels would share a rank and leave a slot unset.
fn beats(j: u32, score_i: f32, index_i: u32, i_slot: u32) -> bool {
    let score_j = chunk_score[j];
    let index_j = chunk_index[j];
    return score_j > score_i
        || (score_j == score_i && (index_j < index_i || (index_j == index_i && j < i_slot)));
}

// Ranks this invocation's candidate within the chunk (already in workgroup memory) and
// writes the chunk's top k to slots chunk * k .. chunk * k + k - 1 of query q's output.
fn rank_and_write(lid: u32, chunk: u32, q: u32, valid_in_chunk: u32) {
    let out_base = q * params.out_stride + chunk * params.k;
    if (lid >= valid_in_chunk) {
        // No candidate here: pad the slots the real candidates cannot fill.
        if (lid < params.k) {
            out_score[out_base + lid] = LOWEST;
            out_index[out_base + lid] = NO_INDEX;
        }
        return;
    }
    let score_i = chunk_score[lid];
    let index_i = chunk_index[lid];
    var rank = 0u;
    for (var j = 0u; j < valid_in_chunk; j++) {
        rank += select(0u, 1u, beats(j, score_i, index_i, lid));
    }
    if (rank < params.k) {
        out_score[out_base + rank] = score_i;
        out_index[out_base + rank] = index_i;
    }
}

@compute @workgroup_size(WG)
fn select_first(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_id) lid3: vec3<u32>) {
    let q = wid.y;
    let chunk = wid.x;
    if (q >= params.queries) {
        return;  // uniform across the workgroup
    }
    let lid = lid3.x;
    let item = chunk * WG + lid;
    let valid_in_chunk = min(WG, params.n - chunk * WG);
    var score = LOWEST;
    if (item < params.n) {
        let qb = q * params.dim;
        let sb = item * params.dim;
        var acc = 0.0;
        for (var d = 0u; d < params.dim; d++) {
            acc = fma(qnorm[qb + d], stored[sb + d], acc);
        }
        score = acc;
    }
    chunk_score[lid] = score;
    chunk_index[lid] = item;
    workgroupBarrier();
    rank_and_write(lid, chunk, q, valid_in_chunk);
}

@compute @workgroup_size(WG)
fn select_merge(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_id) lid3: vec3<u32>) {
    let q = wid.y;
    let chunk = wid.x;
    if (q >= params.queries) {
        return;  // uniform across the workgroup
    }
    let lid = lid3.x;
    let item = chunk * WG + lid;
    let valid_in_chunk = min(WG, params.n - chunk * WG);
    var score = LOWEST;
    var index = NO_INDEX;
    if (item < params.n) {
        score = in_score[q * params.n + item];
        index = in_index[q * params.n + item];
    }
    chunk_score[lid] = score;
    chunk_index[lid] = index;
    workgroupBarrier();
    rank_and_write(lid, chunk, q, valid_in_chunk);
}
