// moe.wgsl — the cortex's routed experts: router softmax + top-k, the k-of-E SwiGLU experts
// by gathered expert index, the load-balancing loss, and their backward.
//
// Computes, for one cortex layer (rows base .. base + M of the stacked router buffers), on
// M token rows of width D, E routed experts of width F, k experts per row:
//   route            probs[r] = softmax(x[m] . router^T); idx[r] = its top k, by descending
//                    probability, equal probabilities to the lower expert (as ops.moe)
//   expert_hidden    a[p, f] = x[m] . gate_proj[e, f];  b[p, f] = x[m] . up_proj[e, f];
//                    h[p, f] = silu(a[p, f]) * b[p, f]
//   expert_out       out[p, d] = sum_f down_proj[e, d, f] * h[p, f]
//   combine          y[m] = sum_j probs[r, idx[r, j]] * out[m*k + j] + sigmoid(pre[m]) * shared[m]
//   aux_stats        stats[l, e] = (count of e in layer l's idx, sum of layer l's probs[:, e])
//   aux_loss         aux = E * sum_e f_e * P_e over every layer's rows (HF's pooled value);
//                    aux_out = [aux, coef * E * f_e / R for each e] (d loss / d probs[r, e])
//   build_lists      list[e] = the pairs p = m*k + j routed to e, in row order; count[e]
//   router_bwd       dlogits[m] = softmax backward of dprobs[m, e] = aux_out[1 + e]
//                    + sum_j [idx[r, j] == e] * dy[m] . out[m*k + j]
//   expert_hidden_bwd  dh = g * dy[m] . down_proj[e, :, f];  da = dh * b * silu'(a);
//                    db = dh * silu(a)      (g = the pair's gate)
//   expert_dx        dx[m, d] = sum_j sum_f da[p, f] gate_proj[e, f, d] + db[p, f] up_proj[e, f, d]
//   expert_dgate_up  dgate[e, f, d] (+)= sum over e's pairs of da[p, f] x[m, d]; dup with db
//   expert_ddown     ddown[e, d, f] (+)= sum over e's pairs of g dy[m, d] h[p, f]
//   shared_gate_bwd  dys[m] = sigmoid(pre[m]) dy[m];  dpre[m] = dy[m] . shared[m] * s (1 - s)
// with m the row, r = base + m its row in the stacked buffers, j < k a slot, p = m*k + j a
// (row, slot) pair and e = idx[r, j] its expert. The shared expert's matmuls are Matmul and
// elementwise dispatches; this file only gates it (combine, shared_gate_bwd).
//
// Bindings (group 0; each entry point binds only the ones it uses, at most 8 storage):
//   0 x          storage read        M*D f32 (the normed rows)
//   1 router     storage read        E*D f32
//   2 gate_proj  storage read        E*F*D f32
//   3 up_proj    storage read        E*F*D f32
//   4 down_proj  storage read        E*D*F f32
//   5 probs      storage read_write  R*E f32 (every layer's rows: R = layers * M)
//   6 idx        storage read_write  R*k u32
//   7 pair_a     storage read_write  M*k*F f32 (the gate projections, pre-activation)
//   8 pair_b     storage read_write  M*k*F f32 (the up projections)
//   9 pair_out   storage read_write  M*k*D f32 (each pair's expert output, ungated)
//  10 y          storage read_write  M*D f32 (combine's output; expert_dx's dx)
//  11 dy         storage read        M*D f32
//  12 shared     storage read        M*D f32 (the shared expert's output)
//  13 pre        storage read_write  M f32 (the shared expert gate's logit)
//  14 lists      storage read_write  E*M u32
//  15 counts     storage read_write  E u32
//  16 stats      storage read_write  layers*E*2 f32
//  17 aux_out    storage read_write  1+E f32
//  18 dlogits    storage read_write  M*E f32
//  19 dw1        storage read_write  dgate (E*F*D) or ddown (E*D*F) f32
//  20 dw2        storage read_write  dup (E*F*D) f32
//  21 pair_da    storage read_write  M*k*F f32
//  22 pair_db    storage read_write  M*k*F f32
//  23 params     uniform             Params
//  24 dpre       storage read_write  M f32 (d loss / d the shared gate's logit)
//  25 pair_h     storage read_write  M*k*F f32 (silu(a) * b: computed once, read D times)
// Dispatch: grid_1d(n, WG) over the entry's n invocations — flat index
// (wid.y * nwg.x + wid.x) * WG + lid.x — with n = M (route, router_bwd, shared_gate_bwd),
// M*k*ceil(F/4) (expert_hidden[_bwd]), M*k*ceil(D/4) (expert_out), M*D (combine),
// M*ceil(D/4) (expert_dx), layers*E (aux_stats), 1 (aux_loss), E (build_lists),
// E*ceil(F/4)*ceil(D/4) (expert_dgate_up, expert_ddown: a 4 x 4 tile of the weight each).
// No float atomics: every output element has one invocation (an expert kernel's invocation
// owns a tile of TILE outputs), which loops over what it sums
// (an expert's weight gradient loops over that expert's pair list), so the sums are ordered
// and the results deterministic.
// Numerical hazards: the softmax subtracts the row max before exp; sigmoid only exponentiates
// a non-positive number. Top-k is discontinuous: probabilities equal in f32 but not in the
// float64 reference can pick another expert (tests keep a margin between ranks). A NaN
// logit breaks the rank order (the row then routes to fewer than k distinct experts).

struct Params {
    rows: u32,      // M, the rows of this layer
    dim: u32,       // D
    experts: u32,   // E
    inner: u32,     // F
    top_k: u32,     // k
    base: u32,      // this layer's first row in probs / idx
    layers: u32,    // aux_*: layers stacked in probs / idx
    accumulate: u32,  // weight gradients: add into dw1 / dw2 instead of overwriting
    coef: f32,      // aux_loss: the load-balancing coefficient
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> router: array<f32>;
@group(0) @binding(2) var<storage, read> gate_proj: array<f32>;
@group(0) @binding(3) var<storage, read> up_proj: array<f32>;
@group(0) @binding(4) var<storage, read> down_proj: array<f32>;
@group(0) @binding(5) var<storage, read_write> probs: array<f32>;
@group(0) @binding(6) var<storage, read_write> idx: array<u32>;
@group(0) @binding(7) var<storage, read_write> pair_a: array<f32>;
@group(0) @binding(8) var<storage, read_write> pair_b: array<f32>;
@group(0) @binding(9) var<storage, read_write> pair_out: array<f32>;
@group(0) @binding(10) var<storage, read_write> y: array<f32>;
@group(0) @binding(11) var<storage, read> dy: array<f32>;
@group(0) @binding(12) var<storage, read> shared_out: array<f32>;
@group(0) @binding(13) var<storage, read_write> pre: array<f32>;
@group(0) @binding(14) var<storage, read_write> lists: array<u32>;
@group(0) @binding(15) var<storage, read_write> counts: array<u32>;
@group(0) @binding(16) var<storage, read_write> stats: array<f32>;
@group(0) @binding(17) var<storage, read_write> aux_out: array<f32>;
@group(0) @binding(18) var<storage, read_write> dlogits: array<f32>;
@group(0) @binding(19) var<storage, read_write> dw1: array<f32>;
@group(0) @binding(20) var<storage, read_write> dw2: array<f32>;
@group(0) @binding(21) var<storage, read_write> pair_da: array<f32>;
@group(0) @binding(22) var<storage, read_write> pair_db: array<f32>;
@group(0) @binding(23) var<uniform> params: Params;
@group(0) @binding(24) var<storage, read_write> dpre: array<f32>;
@group(0) @binding(25) var<storage, read_write> pair_h: array<f32>;

override WG: u32 = 64;
// Outputs per invocation along one axis (TILE x TILE for the weight gradients): a load then
// serves TILE FMAs. The arrays that hold the tile are sized 4 and 16: keep TILE = 4.
const TILE: u32 = 4u;

fn flat_index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

// sigmoid without overflow: exp() only ever sees a non-positive argument.
fn sigmoid(v: f32) -> f32 {
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

fn silu(v: f32) -> f32 {
    return v * sigmoid(v);
}

// The expert of pair p = m*k + j of this layer.
fn pair_expert(p: u32) -> u32 {
    return idx[params.base * params.top_k + p];
}

// The gate of pair p: the router probability of its expert (not renormalised).
fn pair_gate(p: u32) -> f32 {
    let m = p / params.top_k;
    return probs[(params.base + m) * params.experts + pair_expert(p)];
}

@compute @workgroup_size(WG)
fn route(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let m = flat_index(wid, lid, nwg);
    if (m >= params.rows) { return; }
    let n_e = params.experts;
    let out = (params.base + m) * n_e;
    // Logits into the probs row, then softmax in place (max subtracted first).
    var top = -3.4028234e38;
    for (var e = 0u; e < n_e; e++) {
        var acc = 0.0;
        for (var d = 0u; d < params.dim; d++) {
            acc = fma(x[m * params.dim + d], router[e * params.dim + d], acc);
        }
        probs[out + e] = acc;
        top = max(top, acc);
    }
    var total = 0.0;
    for (var e = 0u; e < n_e; e++) {
        let v = exp(probs[out + e] - top);
        probs[out + e] = v;
        total += v;
    }
    for (var e = 0u; e < n_e; e++) {
        probs[out + e] = probs[out + e] / total;
    }
    // Rank selection: e's rank counts the experts before it (higher probability, or equal
    // and a lower index); ranks are distinct, so the k slots fill exactly, in order.
    for (var e = 0u; e < n_e; e++) {
        let pe = probs[out + e];
        var rank = 0u;
        for (var o = 0u; o < n_e; o++) {
            let po = probs[out + o];
            rank += select(0u, 1u, po > pe || (po == pe && o < e));
        }
        if (rank < params.top_k) {
            idx[(params.base + m) * params.top_k + rank] = e;
        }
    }
}

@compute @workgroup_size(WG)
fn expert_hidden(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(local_invocation_id) lid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
    // TILE consecutive f of one pair per invocation: each x load serves 2 * TILE FMAs.
    let i = flat_index(wid, lid, nwg);
    let tiles_f = (params.inner + TILE - 1u) / TILE;
    if (i >= params.rows * params.top_k * tiles_f) { return; }
    let p = i / tiles_f;
    let f0 = (i % tiles_f) * TILE;
    let m = p / params.top_k;
    let w = (pair_expert(p) * params.inner + f0) * params.dim;
    var acc_a: array<f32, 4>;
    var acc_b: array<f32, 4>;
    for (var d = 0u; d < params.dim; d++) {
        let xv = x[m * params.dim + d];
        for (var ff = 0u; ff < TILE; ff++) {
            if (f0 + ff < params.inner) {
                acc_a[ff] = fma(xv, gate_proj[w + ff * params.dim + d], acc_a[ff]);
                acc_b[ff] = fma(xv, up_proj[w + ff * params.dim + d], acc_b[ff]);
            }
        }
    }
    for (var ff = 0u; ff < TILE; ff++) {
        if (f0 + ff < params.inner) {
            let h = p * params.inner + f0 + ff;
            pair_a[h] = acc_a[ff];
            pair_b[h] = acc_b[ff];
            pair_h[h] = silu(acc_a[ff]) * acc_b[ff];
        }
    }
}

@compute @workgroup_size(WG)
fn expert_out(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    // TILE consecutive d of one pair per invocation: each h load serves TILE FMAs.
    let i = flat_index(wid, lid, nwg);
    let tiles_d = (params.dim + TILE - 1u) / TILE;
    if (i >= params.rows * params.top_k * tiles_d) { return; }
    let p = i / tiles_d;
    let d0 = (i % tiles_d) * TILE;
    let w = (pair_expert(p) * params.dim + d0) * params.inner;
    var acc: array<f32, 4>;
    for (var f = 0u; f < params.inner; f++) {
        let hv = pair_h[p * params.inner + f];
        for (var dd = 0u; dd < TILE; dd++) {
            if (d0 + dd < params.dim) {
                acc[dd] = fma(hv, down_proj[w + dd * params.inner + f], acc[dd]);
            }
        }
    }
    for (var dd = 0u; dd < TILE; dd++) {
        if (d0 + dd < params.dim) {
            pair_out[p * params.dim + d0 + dd] = acc[dd];
        }
    }
}

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.rows * params.dim) { return; }
    let m = i / params.dim;
    let d = i % params.dim;
    var acc = 0.0;
    for (var j = 0u; j < params.top_k; j++) {
        let p = m * params.top_k + j;
        acc = fma(pair_gate(p), pair_out[p * params.dim + d], acc);
    }
    y[i] = acc + sigmoid(pre[m]) * shared_out[i];
}

@compute @workgroup_size(WG)
fn aux_stats(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.layers * params.experts) { return; }
    let layer = i / params.experts;
    let e = i % params.experts;
    var count = 0u;
    var mass = 0.0;
    for (var m = 0u; m < params.rows; m++) {
        let r = layer * params.rows + m;
        mass += probs[r * params.experts + e];
        for (var j = 0u; j < params.top_k; j++) {
            count += select(0u, 1u, idx[r * params.top_k + j] == e);
        }
    }
    stats[2u * i] = f32(count);
    stats[2u * i + 1u] = mass;
}

@compute @workgroup_size(1)
fn aux_loss(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x > 0u) { return; }
    let n_e = params.experts;
    let total_rows = f32(params.layers * params.rows);
    var aux = 0.0;
    for (var e = 0u; e < n_e; e++) {
        var count = 0.0;
        var mass = 0.0;
        for (var layer = 0u; layer < params.layers; layer++) {
            count += stats[2u * (layer * n_e + e)];
            mass += stats[2u * (layer * n_e + e) + 1u];
        }
        let fraction = count / total_rows;
        aux += fraction * (mass / total_rows);
        // f is a count: the loss's gradient flows through P alone.
        aux_out[1u + e] = params.coef * f32(n_e) * fraction / total_rows;
    }
    aux_out[0] = f32(n_e) * aux;
}

@compute @workgroup_size(WG)
fn build_lists(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(local_invocation_id) lid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat_index(wid, lid, nwg);
    if (e >= params.experts) { return; }
    // A row picks an expert at most once, so an expert's list holds at most M pairs.
    var count = 0u;
    for (var p = 0u; p < params.rows * params.top_k; p++) {
        if (pair_expert(p) == e) {
            lists[e * params.rows + count] = p;
            count += 1u;
        }
    }
    counts[e] = count;
}

@compute @workgroup_size(WG)
fn router_bwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let m = flat_index(wid, lid, nwg);
    if (m >= params.rows) { return; }
    let n_e = params.experts;
    let row = m * n_e;
    let prob_row = (params.base + m) * n_e;
    // dprobs: the aux loss's term for every expert, plus dy . out for the chosen ones.
    for (var e = 0u; e < n_e; e++) {
        dlogits[row + e] = aux_out[1u + e];
    }
    for (var j = 0u; j < params.top_k; j++) {
        let p = m * params.top_k + j;
        var acc = 0.0;
        for (var d = 0u; d < params.dim; d++) {
            acc = fma(dy[m * params.dim + d], pair_out[p * params.dim + d], acc);
        }
        let e = pair_expert(p);
        dlogits[row + e] = dlogits[row + e] + acc;
    }
    // Softmax backward: dlogits = p * (dp - sum_e p dp).
    var dot = 0.0;
    for (var e = 0u; e < n_e; e++) {
        dot = fma(probs[prob_row + e], dlogits[row + e], dot);
    }
    for (var e = 0u; e < n_e; e++) {
        dlogits[row + e] = probs[prob_row + e] * (dlogits[row + e] - dot);
    }
}

@compute @workgroup_size(WG)
fn expert_hidden_bwd(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(local_invocation_id) lid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>) {
    // TILE consecutive f of one pair per invocation: each dy load serves TILE FMAs.
    let i = flat_index(wid, lid, nwg);
    let tiles_f = (params.inner + TILE - 1u) / TILE;
    if (i >= params.rows * params.top_k * tiles_f) { return; }
    let p = i / tiles_f;
    let f0 = (i % tiles_f) * TILE;
    let m = p / params.top_k;
    let w = pair_expert(p) * params.dim * params.inner + f0;
    var acc: array<f32, 4>;
    for (var d = 0u; d < params.dim; d++) {
        let dyv = dy[m * params.dim + d];
        for (var ff = 0u; ff < TILE; ff++) {
            if (f0 + ff < params.inner) {
                acc[ff] = fma(dyv, down_proj[w + d * params.inner + ff], acc[ff]);
            }
        }
    }
    let gate = pair_gate(p);
    for (var ff = 0u; ff < TILE; ff++) {
        if (f0 + ff < params.inner) {
            let h = p * params.inner + f0 + ff;
            let dh = gate * acc[ff];
            let a = pair_a[h];
            let s = sigmoid(a);
            pair_da[h] = dh * pair_b[h] * s * (1.0 + a * (1.0 - s));
            pair_db[h] = dh * a * s;
        }
    }
}

@compute @workgroup_size(WG)
fn expert_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    // TILE consecutive d of one row per invocation: each (da, db) load serves 2 * TILE FMAs.
    let i = flat_index(wid, lid, nwg);
    let tiles_d = (params.dim + TILE - 1u) / TILE;
    if (i >= params.rows * tiles_d) { return; }
    let m = i / tiles_d;
    let d0 = (i % tiles_d) * TILE;
    var acc: array<f32, 4>;
    for (var j = 0u; j < params.top_k; j++) {
        let p = m * params.top_k + j;
        let w = pair_expert(p) * params.inner * params.dim + d0;
        for (var f = 0u; f < params.inner; f++) {
            let h = p * params.inner + f;
            let da = pair_da[h];
            let db = pair_db[h];
            for (var dd = 0u; dd < TILE; dd++) {
                if (d0 + dd < params.dim) {
                    acc[dd] = fma(da, gate_proj[w + f * params.dim + dd], acc[dd]);
                    acc[dd] = fma(db, up_proj[w + f * params.dim + dd], acc[dd]);
                }
            }
        }
    }
    for (var dd = 0u; dd < TILE; dd++) {
        if (d0 + dd < params.dim) {
            y[m * params.dim + d0 + dd] = acc[dd];
        }
    }
}

@compute @workgroup_size(WG)
fn expert_dgate_up(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(local_invocation_id) lid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    let tiles_f = (params.inner + TILE - 1u) / TILE;
    let tiles_d = (params.dim + TILE - 1u) / TILE;
    if (i >= params.experts * tiles_f * tiles_d) { return; }
    let e = i / (tiles_f * tiles_d);
    let f0 = ((i / tiles_d) % tiles_f) * TILE;
    let d0 = (i % tiles_d) * TILE;
    var acc_g: array<f32, 16>;  // [f - f0][d - d0], zero-initialised
    var acc_u: array<f32, 16>;
    var xv: array<f32, 4>;
    // Only the pairs routed to e: an expert no row chose sums nothing and gets zero.
    for (var c = 0u; c < counts[e]; c++) {
        let p = lists[e * params.rows + c];
        let x_row = (p / params.top_k) * params.dim;
        for (var dd = 0u; dd < TILE; dd++) {
            if (d0 + dd < params.dim) {
                xv[dd] = x[x_row + d0 + dd];
            }
        }
        for (var ff = 0u; ff < TILE; ff++) {
            if (f0 + ff < params.inner) {
                let h = p * params.inner + f0 + ff;
                let a = pair_da[h];
                let b = pair_db[h];
                for (var dd = 0u; dd < TILE; dd++) {
                    acc_g[ff * TILE + dd] = fma(a, xv[dd], acc_g[ff * TILE + dd]);
                    acc_u[ff * TILE + dd] = fma(b, xv[dd], acc_u[ff * TILE + dd]);
                }
            }
        }
    }
    for (var ff = 0u; ff < TILE; ff++) {
        for (var dd = 0u; dd < TILE; dd++) {
            if (f0 + ff < params.inner && d0 + dd < params.dim) {
                let w = (e * params.inner + f0 + ff) * params.dim + d0 + dd;
                var g = acc_g[ff * TILE + dd];
                var u = acc_u[ff * TILE + dd];
                if (params.accumulate != 0u) {
                    g += dw1[w];
                    u += dw2[w];
                }
                dw1[w] = g;
                dw2[w] = u;
            }
        }
    }
}

@compute @workgroup_size(WG)
fn expert_ddown(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    let tiles_d = (params.dim + TILE - 1u) / TILE;
    let tiles_f = (params.inner + TILE - 1u) / TILE;
    if (i >= params.experts * tiles_d * tiles_f) { return; }
    let e = i / (tiles_d * tiles_f);
    let d0 = ((i / tiles_f) % tiles_d) * TILE;
    let f0 = (i % tiles_f) * TILE;
    var acc: array<f32, 16>;  // [d - d0][f - f0], zero-initialised
    var hv: array<f32, 4>;
    for (var c = 0u; c < counts[e]; c++) {
        let p = lists[e * params.rows + c];
        let gate = pair_gate(p);
        let dy_row = (p / params.top_k) * params.dim;
        for (var ff = 0u; ff < TILE; ff++) {
            if (f0 + ff < params.inner) {
                hv[ff] = pair_h[p * params.inner + f0 + ff];
            }
        }
        for (var dd = 0u; dd < TILE; dd++) {
            if (d0 + dd < params.dim) {
                let g = gate * dy[dy_row + d0 + dd];
                for (var ff = 0u; ff < TILE; ff++) {
                    acc[dd * TILE + ff] = fma(g, hv[ff], acc[dd * TILE + ff]);
                }
            }
        }
    }
    for (var dd = 0u; dd < TILE; dd++) {
        for (var ff = 0u; ff < TILE; ff++) {
            if (d0 + dd < params.dim && f0 + ff < params.inner) {
                let w = (e * params.dim + d0 + dd) * params.inner + f0 + ff;
                var v = acc[dd * TILE + ff];
                if (params.accumulate != 0u) {
                    v += dw1[w];
                }
                dw1[w] = v;
            }
        }
    }
}

@compute @workgroup_size(WG)
fn shared_gate_bwd(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(local_invocation_id) lid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
    let m = flat_index(wid, lid, nwg);
    if (m >= params.rows) { return; }
    let s = sigmoid(pre[m]);
    var acc = 0.0;
    for (var d = 0u; d < params.dim; d++) {
        let i = m * params.dim + d;
        acc = fma(dy[i], shared_out[i], acc);
        y[i] = s * dy[i];
    }
    dpre[m] = acc * s * (1.0 - s);
}
