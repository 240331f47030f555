// cross_entropy.wgsl — fused softmax cross-entropy over the vocabulary, forward + backward.
//
// Computes, for every row i < M of logits (M, V) with target t = targets[i]:
//   valid row (0 <= t < V, t != ignore_index):
//     row_loss[i]   = logsumexp(logits[i, :]) - logits[i, t]
//     dlogits[i, v] = (softmax(logits[i, :])[v] - (v == t)) * scale
//   ignored row (t == ignore_index, or t out of range — the host validates token ids):
//     row_loss[i] = 0, dlogits[i, :] = 0
// scale is 1 / (number of valid targets), known to the host, so dlogits is the gradient of
// the MEAN loss. A second entry point reduces the row losses to that mean:
//   loss_mean: loss[0] = scale * sum_i row_loss[i]
// Two strategies compute the same values. Tree (softmax_xent, loss_mean): a workgroup per
// row reduced through workgroup memory, for GPUs. Row-serial (softmax_xent_rows,
// loss_mean_serial): an invocation per row looping over V in index order (and one
// invocation summing the rows in order), with no workgroup memory and no barriers, for
// CPU adapters (lavapipe, SwiftShader), where barriers are expensive. The row-serial
// forward stores exp(logit - max) in dlogits on its second pass and rescales it on the
// third, so it evaluates exp once per logit instead of twice.
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 logits    storage read        M*V f32
//   1 targets   storage read        M i32
//   2 row_loss  storage read_write  M f32
//   3 dlogits   storage read_write  M*V f32
//   4 loss      storage read_write  1 f32
//   5 params    uniform             Params
// Dispatch: softmax_xent — one workgroup per row, row = wid.y * nwg.x + wid.x (2-D past
// 65,535 rows); the WG invocations stride over the row (v = lid.x, lid.x + WG, ...).
// loss_mean — a single workgroup. softmax_xent_rows — grid_1d(M, WG), invocation = row.
// loss_mean_serial — one workgroup; invocation 0 does the work.
// Determinism: every reduction is a fixed-shape tree in workgroup memory (WG must be a
// power of two) or a loop in index order, so repeated runs give identical bits.
// Numerical hazards: logits are shifted by the row max before exp, so exp only sees
// arguments <= 0 (stable for logits of +-1e4 and beyond); the loss is computed as
// log(sum) - (logit_t - max), never as -log(softmax), so it cannot become log(0).

struct Params {
    m: u32,
    v: u32,
    ignore_index: i32,
    scale: f32,
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> targets: array<i32>;
@group(0) @binding(2) var<storage, read_write> row_loss: array<f32>;
@group(0) @binding(3) var<storage, read_write> dlogits: array<f32>;
@group(0) @binding(4) var<storage, read_write> loss: array<f32>;
@group(0) @binding(5) var<uniform> params: Params;

override WG: u32 = 256;

var<workgroup> scratch: array<f32, WG>;

// Tree reduction of scratch[0..WG) with max (op 0) or + (op 1); result in scratch[0].
// Must be called from uniform control flow by every invocation of the workgroup.
fn reduce_scratch(lid: u32, use_max: bool) {
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        workgroupBarrier();
        if (lid < stride) {
            let other = scratch[lid + stride];
            if (use_max) {
                scratch[lid] = max(scratch[lid], other);
            } else {
                scratch[lid] = scratch[lid] + other;
            }
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn softmax_xent(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_id) lid3: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= params.m) {
        return;  // uniform across the workgroup: every invocation has the same row
    }
    let lid = lid3.x;
    let v_len = params.v;
    let base = row * v_len;
    let t = targets[row];
    let valid = t != params.ignore_index && t >= 0 && u32(t) < v_len;

    // 1. Row max.
    // -FLT_MAX. Not written -3.4028235e38: that decimal lies just outside the f32 range
    // before rounding and Tint (Chrome) rejects it; -3.4028234e38 rounds to -FLT_MAX.
    var local_max = -3.4028234e38;
    for (var v = lid; v < v_len; v += WG) {
        local_max = max(local_max, logits[base + v]);
    }
    scratch[lid] = local_max;
    reduce_scratch(lid, true);
    let row_max = scratch[0];
    workgroupBarrier();  // everyone has read scratch[0] before it is overwritten

    // 2. Sum of exp(logit - max); every term is in (0, 1], the max's term is exactly 1.
    var local_sum = 0.0;
    for (var v = lid; v < v_len; v += WG) {
        local_sum += exp(logits[base + v] - row_max);
    }
    scratch[lid] = local_sum;
    reduce_scratch(lid, false);
    let total = scratch[0];

    // 3. Loss and gradient.
    if (!valid) {
        for (var v = lid; v < v_len; v += WG) {
            dlogits[base + v] = 0.0;
        }
        if (lid == 0u) {
            row_loss[row] = 0.0;
        }
        return;
    }
    let inv_total = 1.0 / total;
    let target_id = u32(t);
    for (var v = lid; v < v_len; v += WG) {
        let p = exp(logits[base + v] - row_max) * inv_total;
        dlogits[base + v] = (p - select(0.0, 1.0, v == target_id)) * params.scale;
    }
    if (lid == 0u) {
        row_loss[row] = log(total) - (logits[base + target_id] - row_max);
    }
}

@compute @workgroup_size(WG)
fn loss_mean(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    var local_sum = 0.0;
    for (var i = lid; i < params.m; i += WG) {
        local_sum += row_loss[i];
    }
    scratch[lid] = local_sum;
    reduce_scratch(lid, false);
    if (lid == 0u) {
        loss[0] = scratch[0] * params.scale;
    }
}

// -- row-serial strategy: one invocation per row, no workgroup memory, no barriers ----------

@compute @workgroup_size(WG)
fn softmax_xent_rows(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(local_invocation_id) lid3: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = (wid.y * nwg.x + wid.x) * WG + lid3.x;
    if (row >= params.m) {
        return;
    }
    let v_len = params.v;
    let base = row * v_len;
    let t = targets[row];
    let valid = t != params.ignore_index && t >= 0 && u32(t) < v_len;
    if (!valid) {
        for (var v = 0u; v < v_len; v++) {
            dlogits[base + v] = 0.0;
        }
        row_loss[row] = 0.0;
        return;
    }
    // 1. Row max (-FLT_MAX written as in softmax_xent).
    var row_max = -3.4028234e38;
    for (var v = 0u; v < v_len; v++) {
        row_max = max(row_max, logits[base + v]);
    }
    // 2. exp(logit - max), kept in dlogits, and its sum; every term is in (0, 1]. Eight
    // interleaved partial sums (two vec4 lanes, v mod 8), added as a fixed tree at the end:
    // one running sum would add every small term to the max's 1.0 and lose ~V/2 roundings
    // of 1 ulp (the tree strategy's error is much smaller); eight cut that eightfold.
    var acc_lo = vec4<f32>(0.0);
    var acc_hi = vec4<f32>(0.0);
    var v = 0u;
    for (; v + 8u <= v_len; v += 8u) {
        let at = base + v;
        let e_lo = exp(vec4<f32>(logits[at], logits[at + 1u], logits[at + 2u], logits[at + 3u])
                       - row_max);
        let e_hi = exp(vec4<f32>(logits[at + 4u], logits[at + 5u], logits[at + 6u],
                                 logits[at + 7u]) - row_max);
        dlogits[at] = e_lo.x;
        dlogits[at + 1u] = e_lo.y;
        dlogits[at + 2u] = e_lo.z;
        dlogits[at + 3u] = e_lo.w;
        dlogits[at + 4u] = e_hi.x;
        dlogits[at + 5u] = e_hi.y;
        dlogits[at + 6u] = e_hi.z;
        dlogits[at + 7u] = e_hi.w;
        acc_lo += e_lo;
        acc_hi += e_hi;
    }
    var tail = 0.0;  // the last V mod 8 terms
    for (; v < v_len; v++) {
        let e = exp(logits[base + v] - row_max);
        dlogits[base + v] = e;
        tail += e;
    }
    let lanes = acc_lo + acc_hi;
    let total = ((lanes.x + lanes.y) + (lanes.z + lanes.w)) + tail;
    // 3. Gradient from the stored exps; the loss as log(sum) - (logit_t - max).
    let inv_total = 1.0 / total;
    let target_id = u32(t);
    for (var v = 0u; v < v_len; v++) {
        let p = dlogits[base + v] * inv_total;
        dlogits[base + v] = (p - select(0.0, 1.0, v == target_id)) * params.scale;
    }
    row_loss[row] = log(total) - (logits[base + target_id] - row_max);
}

@compute @workgroup_size(WG)
fn loss_mean_serial(@builtin(local_invocation_id) lid3: vec3<u32>) {
    if (lid3.x != 0u) {
        return;
    }
    var sum = 0.0;
    for (var i = 0u; i < params.m; i++) {
        sum += row_loss[i];
    }
    loss[0] = sum * params.scale;
}
