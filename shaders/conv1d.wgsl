// conv1d.wgsl — causal depthwise 1-D convolution along time (Mamba's conv1d), fwd and bwd.
//
// Computes, for x (B, L, D), weight (D, 1, K) in PyTorch's layout (flat d*K + k), bias (D):
//   conv1d_fwd             y[b,t,d] = bias[d] + sum_{k<K} w[d,k] * x[b, t-(K-1)+k, d]
//                          (x = 0 before t = 0: torch F.conv1d(padding=K-1, groups=D)[..., :L])
//   conv1d_bwd_dx          dx[b,s,d] (+)= sum_{k<K, s+(K-1)-k < L} w[d,k] * dy[b, s+(K-1)-k, d]
//   conv1d_bwd_dw_partial  for each chunk c of R consecutive rows r = b*L + t (ascending):
//                          partial[c, k, d] = sum_r dy[r, d] * x[b, t-(K-1)+k, d]  (k < K)
//                          partial[c, K, d] = sum_r dy[r, d]
//   conv1d_bwd_dw_finish   dw[d,k] (+)= sum_c partial[c, k, d];  db[d] (+)= sum_c partial[c, K, d]
// "(+)=" accumulates when params.accumulate != 0 and overwrites otherwise.
// x and dx may be a column slice of a wider row-major buffer (Mamba's in_proj output holds
// x and z side by side): element (r, d) lives at x_offset + r * x_stride + d. y and dy are
// dense (B, L, D).
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 x        storage read        x_offset + (B*L - 1) * x_stride + D f32
//   1 weight   storage read        D*K f32
//   2 bias     storage read        D f32
//   3 y        storage read_write  B*L*D f32
//   4 dy       storage read        B*L*D f32
//   5 dx       storage read_write  like x
//   6 dweight  storage read_write  D*K f32
//   7 dbias    storage read_write  D f32
//   8 partial  storage read_write  C*(K+1)*D f32 scratch, C = ceil(B*L / R)
//   9 params   uniform             Params
// Dispatch:
//   conv1d_fwd, conv1d_bwd_dx: grid_1d(B*L*D, WG); flat index i -> (r, d) = (i / D, i % D).
//   conv1d_bwd_dw_partial: (ceil(D / WG), C) workgroups; invocation (c, d).
//   conv1d_bwd_dw_finish: grid_1d((K+1)*D, WG); invocation i -> (k, d) = (i / D, i % D).
// Determinism: every output has exactly one writer and every sum a fixed loop order.
// Hazards: K <= MAX_TAPS (8) because the partial pass keeps K+1 sums in registers; taps
// that would read before t = 0 are skipped (the zero padding), never read.

struct Params {
    batch: u32,
    length: u32,
    channels: u32,
    taps: u32,
    x_stride: u32,
    x_offset: u32,
    rows_per_chunk: u32,
    chunks: u32,
    accumulate: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> weight: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> dy: array<f32>;
@group(0) @binding(5) var<storage, read_write> dx: array<f32>;
@group(0) @binding(6) var<storage, read_write> dweight: array<f32>;
@group(0) @binding(7) var<storage, read_write> dbias: array<f32>;
@group(0) @binding(8) var<storage, read_write> partial: array<f32>;
@group(0) @binding(9) var<uniform> params: Params;

override WG: u32 = 256;
const MAX_TAPS: u32 = 8u;

fn flat_index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

fn x_at(row: u32, d: u32) -> u32 {
    return params.x_offset + row * params.x_stride + d;
}

@compute @workgroup_size(WG)
fn conv1d_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    let channels = params.channels;
    if (i >= params.batch * params.length * channels) { return; }
    let row = i / channels;
    let d = i - row * channels;
    let t = row % params.length;
    let taps = params.taps;
    var acc = bias[d];
    // Tap k reads time t - (K-1) + k; the first K-1-t taps fall into the zero padding.
    let first = (taps - 1u) - min(t, taps - 1u);
    for (var k = first; k < taps; k++) {
        acc += weight[d * taps + k] * x[x_at(row + k - (taps - 1u), d)];
    }
    y[i] = acc;
}

@compute @workgroup_size(WG)
fn conv1d_bwd_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    let channels = params.channels;
    if (i >= params.batch * params.length * channels) { return; }
    let row = i / channels;
    let d = i - row * channels;
    let s = row % params.length;
    let taps = params.taps;
    // Output time s + (K-1) - k must be < L: k > s + K - 1 - L, i.e. skip the last taps
    // near the end of the sequence.
    let remaining = params.length - 1u - s;  // steps after s inside this sequence
    let first = (taps - 1u) - min(remaining, taps - 1u);
    var acc = 0.0;
    for (var k = first; k < taps; k++) {
        acc += weight[d * taps + k] * dy[(row + (taps - 1u) - k) * channels + d];
    }
    let at = x_at(row, d);
    if (params.accumulate != 0u) {
        acc += dx[at];
    }
    dx[at] = acc;
}

@compute @workgroup_size(WG)
fn conv1d_bwd_dw_partial(@builtin(workgroup_id) wid: vec3<u32>,
                         @builtin(local_invocation_id) lid: vec3<u32>) {
    let d = wid.x * WG + lid.x;
    let chunk = wid.y;
    let channels = params.channels;
    if (d >= channels || chunk >= params.chunks) { return; }
    let taps = params.taps;
    var acc: array<f32, 9>;  // MAX_TAPS + 1: K weight sums then the bias sum
    for (var k = 0u; k <= MAX_TAPS; k++) {
        acc[k] = 0.0;
    }
    let first = chunk * params.rows_per_chunk;
    let last = min(first + params.rows_per_chunk, params.batch * params.length);
    for (var row = first; row < last; row++) {
        let g = dy[row * channels + d];
        let t = row % params.length;
        let k0 = (taps - 1u) - min(t, taps - 1u);
        for (var k = k0; k < taps; k++) {
            acc[k] += g * x[x_at(row + k - (taps - 1u), d)];
        }
        acc[taps] += g;
    }
    for (var k = 0u; k <= taps; k++) {
        partial[(chunk * (taps + 1u) + k) * channels + d] = acc[k];
    }
}

@compute @workgroup_size(WG)
fn conv1d_bwd_dw_finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    let channels = params.channels;
    let taps = params.taps;
    if (i >= (taps + 1u) * channels) { return; }
    let k = i / channels;
    let d = i - k * channels;
    var acc = 0.0;
    for (var chunk = 0u; chunk < params.chunks; chunk++) {
        acc += partial[(chunk * (taps + 1u) + k) * channels + d];
    }
    if (k < taps) {
        let at = d * taps + k;
        if (params.accumulate != 0u) {
            acc += dweight[at];
        }
        dweight[at] = acc;
    } else {
        if (params.accumulate != 0u) {
            acc += dbias[d];
        }
        dbias[d] = acc;
    }
}
