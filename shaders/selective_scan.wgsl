// selective_scan.wgsl — the Mamba-1 selective scan (S6), forward and backward.
//
// Computes, with delta = softplus(delta_raw) (identity past 20, as torch) and A = -exp(A_log):
//   h_t = exp(delta_t * A) * h_{t-1} + delta_t * B_t * x_t,   h_{-1} = 0
//   y_t = sum_n C_t[n] h_t[n] + D * x_t
// and its gradients dx, ddelta_raw, dA_log (= dA * A), dB, dC, dD.
//
// Shapes (row-major, tokens-major): x, delta_raw, y, dy, dx, ddelta (B, L, D); B, C, dB, dC
// (B, L, N); A_log, dA_log (D, N); D, dD (D); states (B, L, D, N); dA_part (B, D, N).
// N is the override N_STATE (<= MAX_STATE), so per-channel state lives in registers.
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 x          storage read        (B, L, D)
//   1 delta_raw  storage read        (B, L, D)
//   2 a_log      storage read        (D, N)
//   3 b_in       storage read        (B, L, N)
//   4 c_in       storage read        (B, L, N)
//   5 d_skip     storage read        (D)
//   6 y          storage read_write  (B, L, D)          scan_fwd
//   7 states     storage read_write  (B, L, D, N)       h_t (scan_fwd, STORE_STATES); the backward
//                                                       overwrites it in place with g_t = dL/dh_t
//   8 dy         storage read        (B, L, D)
//   9 ddelta     storage read_write  (B, L, D)          dL/d delta_raw
//  10 dx         storage read_write  (B, L, D)
//  11 d_bc       storage read_write  (B, L, N)          dB (bwd_db) or dC (bwd_dc)
//  12 da_part    storage read_write  (B, D, N)          per-batch dA partials (bwd_scan)
//  13 da_log     storage read_write  (D, N)
//  14 dd         storage read_write  (D)
//  15 params     uniform             Params
//
// Entry points and dispatch geometry (all flat: grid_1d(count, WG), index
// (wid.y * nwg.x + wid.x) * WG + lid.x). The backward is five passes, run in this order:
//   scan_fwd    one invocation per channel (b, d), loop over t;               count B*D
//   bwd_dc      one invocation per (b, t, n), loop over d (reads h);           count B*L*N
//   bwd_scan    one invocation per channel (b, d), reverse loop over t; writes g_t over h_t,
//               the decay part of ddelta and per-batch dA partials;           count B*D
//   bwd_local   one invocation per token (b, t, d): dx, ddelta; g_t -> g_t delta x in place;
//                                                                              count B*L*D
//   bwd_db      one invocation per (b, t, n), loop over d;                     count B*L*N
//   bwd_params  one invocation per d: dA_log, dD, dx += D dy, loops over b, t; count D
// Every reduction is one invocation looping in a fixed order: no atomics, no workgroup memory,
// identical bits run to run. Barrier-free on purpose: on lavapipe a workgroup-per-token-row
// tree reduction (for dC, and for dB fused with bwd_local) measured ~3x slower than these loops.
// states is (B, L, D, N), n fastest: each invocation touches one cache line per step; the
// (B, L, N, D) alternative (d fastest, coalesced across invocations) measured slower on lavapipe.
// No chunked scan over time: at B*D >= 256 channels the CPU adapters are already saturated
// (B1 L512 runs as fast per token as B4 L128), so splitting time would only add passes.
//
// Numerical hazards: exp(delta * A) <= 1 because delta >= 0 and A < 0, so h never overflows;
// softplus only exponentiates non-positive numbers and uses an accurate log1p (delta_raw = -30
// gives delta ~ 9e-14, not 0); d softplus = sigmoid, also exponentiating non-positive numbers only.

struct Params {
    batch: u32,
    length: u32,
    dim: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> delta_raw: array<f32>;
@group(0) @binding(2) var<storage, read> a_log: array<f32>;
@group(0) @binding(3) var<storage, read> b_in: array<f32>;
@group(0) @binding(4) var<storage, read> c_in: array<f32>;
@group(0) @binding(5) var<storage, read> d_skip: array<f32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read_write> states: array<f32>;
@group(0) @binding(8) var<storage, read> dy: array<f32>;
@group(0) @binding(9) var<storage, read_write> ddelta: array<f32>;
@group(0) @binding(10) var<storage, read_write> dx: array<f32>;
@group(0) @binding(11) var<storage, read_write> d_bc: array<f32>;
@group(0) @binding(12) var<storage, read_write> da_part: array<f32>;
@group(0) @binding(13) var<storage, read_write> da_log: array<f32>;
@group(0) @binding(14) var<storage, read_write> dd: array<f32>;
@group(0) @binding(15) var<uniform> params: Params;

// Invocations per workgroup (every entry point).
override WG: u32 = 64;
// The state size N. An override (not a uniform) so loops over n have a constant trip count.
override N_STATE: u32 = 16;
// scan_fwd writes every h_t to `states` (training) or not (inference).
override STORE_STATES: bool = true;

const MAX_STATE: u32 = 64u;
const SOFTPLUS_THRESHOLD: f32 = 20.0;

fn flat_index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

// log(1 + e) for 0 <= e <= 1 without losing small e (Goldberg's trick: the rounding error of
// u = 1 + e cancels in log(u) / (u - 1)).
fn log1p_small(e: f32) -> f32 {
    let u = 1.0 + e;
    if (u == 1.0) {
        return e;
    }
    return log(u) * (e / (u - 1.0));
}

fn softplus(v: f32) -> f32 {
    if (v > SOFTPLUS_THRESHOLD) {
        return v;
    }
    return max(v, 0.0) + log1p_small(exp(-abs(v)));
}

// d softplus / dv = sigmoid(v); exactly 1 past the threshold, as torch.
fn softplus_grad(v: f32) -> f32 {
    if (v > SOFTPLUS_THRESHOLD) {
        return 1.0;
    }
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

@compute @workgroup_size(WG)
fn scan_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);  // channel (b, d)
    if (i >= params.batch * params.dim) { return; }
    let dim = params.dim;
    let b = i / dim;
    let d = i % dim;
    var a: array<f32, MAX_STATE>;
    var h: array<f32, MAX_STATE>;
    for (var n = 0u; n < N_STATE; n++) {
        a[n] = -exp(a_log[d * N_STATE + n]);
        h[n] = 0.0;
    }
    let skip = d_skip[d];
    for (var t = 0u; t < params.length; t++) {
        let row = b * params.length + t;
        let at = row * dim + d;
        let xt = x[at];
        let dt = softplus(delta_raw[at]);
        let dtx = dt * xt;
        var acc = 0.0;
        for (var n = 0u; n < N_STATE; n++) {
            let hn = exp(dt * a[n]) * h[n] + dtx * b_in[row * N_STATE + n];
            h[n] = hn;
            acc += hn * c_in[row * N_STATE + n];
            if (STORE_STATES) {
                states[at * N_STATE + n] = hn;
            }
        }
        y[at] = acc + skip * xt;
    }
}

// dC[b, t, n] = sum_d dy[b, t, d] * h_t[b, d, n], one invocation per (b, t, n), d in order.
// Runs first: bwd_scan overwrites h.
@compute @workgroup_size(WG)
fn bwd_dc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);  // (b, t, n)
    if (i >= params.batch * params.length * N_STATE) { return; }
    let row = i / N_STATE;
    let n = i % N_STATE;
    var total = 0.0;
    for (var d = 0u; d < params.dim; d++) {
        let at = row * params.dim + d;
        total += dy[at] * states[at * N_STATE + n];
    }
    d_bc[i] = total;
}

// The reverse recurrence g_t = dy_t C_t + exp(delta_{t+1} A) g_{t+1}, per channel (b, d).
// Writes g_t over h_t in `states` (h_t is dead once step t+1 has read it as h_prev), the
// decay part of d delta (sum_n g h_{t-1} A decay, pre-softplus-grad) to ddelta, and per-batch
// dA partials sum_t delta g h_{t-1} decay to da_part.
@compute @workgroup_size(WG)
fn bwd_scan(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);  // channel (b, d)
    if (i >= params.batch * params.dim) { return; }
    let dim = params.dim;
    let b = i / dim;
    let d = i % dim;
    var a: array<f32, MAX_STATE>;
    var carry: array<f32, MAX_STATE>;  // exp(delta_{t+1} A) * g_{t+1}
    var da: array<f32, MAX_STATE>;
    for (var n = 0u; n < N_STATE; n++) {
        a[n] = -exp(a_log[d * N_STATE + n]);
        carry[n] = 0.0;
        da[n] = 0.0;
    }
    for (var step = 0u; step < params.length; step++) {
        let t = params.length - 1u - step;
        let row = b * params.length + t;
        let at = row * dim + d;
        let dt = softplus(delta_raw[at]);
        let gy = dy[at];
        var ddt = 0.0;
        for (var n = 0u; n < N_STATE; n++) {
            let g = gy * c_in[row * N_STATE + n] + carry[n];
            var h_prev = 0.0;
            if (t > 0u) {
                h_prev = states[(at - dim) * N_STATE + n];
            }
            let decay = exp(dt * a[n]);
            let w = g * h_prev * decay;
            ddt += w * a[n];
            da[n] += dt * w;
            carry[n] = decay * g;
            states[at * N_STATE + n] = g;
        }
        ddelta[at] = ddt;
    }
    for (var n = 0u; n < N_STATE; n++) {
        da_part[i * N_STATE + n] = da[n];
    }
}

// Per token (b, t, d), with s = sum_n g_t[n] B_t[n]: dx = delta s (bwd_params adds D dy),
// ddelta_raw = (ddelta + x s) * softplus'(delta_raw), and g_t[n] is replaced in place by
// g_t[n] delta x, the summand of dB that bwd_db reduces (so bwd_db needs no softplus).
@compute @workgroup_size(WG)
fn bwd_local(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let at = flat_index(wid, lid, nwg);  // (b, t, d)
    if (at >= params.batch * params.length * params.dim) { return; }
    let row = at / params.dim;
    let raw = delta_raw[at];
    let dt = softplus(raw);
    let xt = x[at];
    let dtx = dt * xt;
    var s = 0.0;
    for (var n = 0u; n < N_STATE; n++) {
        let g = states[at * N_STATE + n];
        s += g * b_in[row * N_STATE + n];
        states[at * N_STATE + n] = g * dtx;
    }
    dx[at] = dt * s;
    ddelta[at] = (ddelta[at] + xt * s) * softplus_grad(raw);
}

// dB[b, t, n] = sum_d g_t[d, n] delta x, one invocation per (b, t, n), d in order.
@compute @workgroup_size(WG)
fn bwd_db(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);  // (b, t, n)
    if (i >= params.batch * params.length * N_STATE) { return; }
    let row = i / N_STATE;
    let n = i % N_STATE;
    var total = 0.0;
    for (var d = 0u; d < params.dim; d++) {
        total += states[(row * params.dim + d) * N_STATE + n];
    }
    d_bc[i] = total;
}

// Per channel d: dA_log = A * sum_b da_part, dD = sum_{b,t} dy x, and dx += D dy.
@compute @workgroup_size(WG)
fn bwd_params(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let d = flat_index(wid, lid, nwg);
    if (d >= params.dim) { return; }
    let dim = params.dim;
    for (var n = 0u; n < N_STATE; n++) {
        var total = 0.0;
        for (var b = 0u; b < params.batch; b++) {
            total += da_part[(b * dim + d) * N_STATE + n];
        }
        // A = -exp(A_log), so dA_log = dA * dA/dA_log = dA * A.
        da_log[d * N_STATE + n] = total * -exp(a_log[d * N_STATE + n]);
    }
    let skip = d_skip[d];
    var total_d = 0.0;
    for (var r = 0u; r < params.batch * params.length; r++) {
        let at = r * dim + d;
        let g = dy[at];
        total_d += g * x[at];
        dx[at] += skip * g;
    }
    dd[d] = total_d;
}
