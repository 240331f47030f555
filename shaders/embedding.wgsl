// embedding.wgsl — token embedding gather (forward) and its scatter-add (backward).
//
// Computes, for M = B*L token ids and a table (V, D):
//   embedding_fwd  out[m,j] = table[ids[m], j]                  (0 for an id outside [0, V))
//   embedding_bwd  grad_table[v,j] += sum over positions p with ids[p] == v, ascending,
//                                     of grad_out[p,j]
// The backward ACCUMULATES: the tied LM head adds its own gradient to grad_table too.
//
// Why a CSR instead of atomics: WGSL has no float atomics, and a compare-and-swap loop on
// the bit pattern would make the summation order (hence the bits) depend on scheduling.
// The host already knows the ids, so it groups positions by token (pure Python, O(M log M),
// rewritten each step with device.write) into one u32 buffer:
//   csr[0]                     U, the number of distinct ids this step (U <= M)
//   csr[1 .. M+2)              offsets: token u's positions are positions[offsets[u] ..
//                              offsets[u+1]) (U+1 of the M+1 slots are used)
//   csr[M+2 .. 2M+2)           unique: the distinct ids, ascending (U used)
//   csr[2M+2 .. 3M+2)          positions: 0..M-1 grouped by id, ascending inside a group
// Invocation (u, j) then owns grad_table[unique[u], j] alone and sums its positions in a
// fixed order, so the result is deterministic and race-free.
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 ids         storage read        M i32
//   1 table       storage read        V*D f32
//   2 out         storage read_write  M*D f32
//   3 csr         storage read        3M+2 u32 (layout above)
//   4 grad_out    storage read        M*D f32
//   5 grad_table  storage read_write  V*D f32
//   6 params      uniform             Params
// Dispatch: both grid_1d(M*D, WG), flat index (wid.y * nwg.x + wid.x) * WG + lid.x read as
// (row, j) = (index / D, index % D). The backward is recorded for the worst case U = M;
// invocations with u >= csr[0] return at once, so the same recording serves every step.
// Hazards: a bad id must never address memory outside the table. The host validates ids
// before writing them; the shader guards again (forward writes 0, backward skips the row).

struct Params {
    m: u32,
    d: u32,
    vocab: u32,
}

@group(0) @binding(0) var<storage, read> ids: array<i32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> csr: array<u32>;
@group(0) @binding(4) var<storage, read> grad_out: array<f32>;
@group(0) @binding(5) var<storage, read_write> grad_table: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;

override WG: u32 = 256;

fn flat_index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

@compute @workgroup_size(WG)
fn embedding_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    if (i >= params.m * params.d) { return; }
    let row = i / params.d;
    let j = i - row * params.d;
    let id = ids[row];
    if (id < 0 || u32(id) >= params.vocab) {
        out[i] = 0.0;
        return;
    }
    out[i] = table[u32(id) * params.d + j];
}

@compute @workgroup_size(WG)
fn embedding_bwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(wid, lid, nwg);
    let m = params.m;
    if (i >= m * params.d) { return; }
    let u = i / params.d;
    let j = i - u * params.d;
    if (u >= min(csr[0], m)) { return; }
    let id = csr[m + 2u + u];
    if (id >= params.vocab) { return; }
    let first = csr[1u + u];
    let last = min(csr[2u + u], m);  // a corrupt offset must not run past the positions
    var acc = 0.0;
    for (var k = first; k < last; k++) {
        let p = csr[2u * m + 2u + k];
        if (p < m) {
            acc += grad_out[p * params.d + j];
        }
    }
    let t = id * params.d + j;
    grad_table[t] = grad_table[t] + acc;
}
