/* The unit an agent compiles to measure its speed (src/agent/speed_probe.rs):
 * self-contained C with no preprocessor directives (it is compiled as a
 * remote unit is, as preprocessed text), with loops, inlining, switch
 * tables and arithmetic enough for -O2 to spend ~0.2 s of CPU on it. Its
 * object is thrown away. Changing it changes every probed speed: keep
 * NOMINAL_COMPILE in step. */

typedef unsigned long size_t;
typedef unsigned int u32;
typedef unsigned long long u64;

struct vec { double x, y, z; };

static inline struct vec vadd(struct vec a, struct vec b) { struct vec r = { a.x + b.x, a.y + b.y, a.z + b.z }; return r; }
static inline struct vec vsub(struct vec a, struct vec b) { struct vec r = { a.x - b.x, a.y - b.y, a.z - b.z }; return r; }
static inline struct vec vscale(struct vec a, double k) { struct vec r = { a.x * k, a.y * k, a.z * k }; return r; }
static inline double vdot(struct vec a, struct vec b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
static inline struct vec vcross(struct vec a, struct vec b) {
    struct vec r = { a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x };
    return r;
}

double probe_bodies(struct vec *pos, struct vec *vel, const double *mass, int n, int steps, double dt) {
    double energy = 0.0;
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < n; i++) {
            for (int j = i + 1; j < n; j++) {
                struct vec d = vsub(pos[i], pos[j]);
                double d2 = vdot(d, d) + 1e-9;
                double inv = 1.0 / (d2 * d2);
                vel[i] = vsub(vel[i], vscale(d, mass[j] * inv * dt));
                vel[j] = vadd(vel[j], vscale(d, mass[i] * inv * dt));
            }
        }
        for (int i = 0; i < n; i++) pos[i] = vadd(pos[i], vscale(vel[i], dt));
    }
    for (int i = 0; i < n; i++) energy += 0.5 * mass[i] * vdot(vel[i], vel[i]) + vdot(vcross(pos[i], vel[i]), pos[i]);
    return energy;
}

static u64 mix(u64 h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

struct slot { u64 key; u64 value; int used; };
struct table { struct slot *slots; size_t cap; size_t len; };

int table_put(struct table *t, u64 key, u64 value) {
    if ((t->len + 1) * 4 > t->cap * 3) return -1;
    size_t i = mix(key) & (t->cap - 1);
    while (t->slots[i].used) {
        if (t->slots[i].key == key) { t->slots[i].value = value; return 0; }
        i = (i + 1) & (t->cap - 1);
    }
    t->slots[i].used = 1;
    t->slots[i].key = key;
    t->slots[i].value = value;
    t->len++;
    return 1;
}

const u64 *table_get(const struct table *t, u64 key) {
    size_t i = mix(key) & (t->cap - 1);
    while (t->slots[i].used) {
        if (t->slots[i].key == key) return &t->slots[i].value;
        i = (i + 1) & (t->cap - 1);
    }
    return 0;
}

static void swap(int *a, int *b) { int t = *a; *a = *b; *b = t; }

static int median3(int *v, int lo, int hi) {
    int mid = lo + (hi - lo) / 2;
    if (v[mid] < v[lo]) swap(&v[mid], &v[lo]);
    if (v[hi] < v[lo]) swap(&v[hi], &v[lo]);
    if (v[hi] < v[mid]) swap(&v[hi], &v[mid]);
    return v[mid];
}

void probe_sort(int *v, int lo, int hi) {
    while (hi - lo > 16) {
        int p = median3(v, lo, hi), i = lo, j = hi;
        while (i <= j) {
            while (v[i] < p) i++;
            while (v[j] > p) j--;
            if (i <= j) { swap(&v[i], &v[j]); i++; j--; }
        }
        if (j - lo < hi - i) { probe_sort(v, lo, j); lo = i; } else { probe_sort(v, i, hi); hi = j; }
    }
    for (int i = lo + 1; i <= hi; i++) {
        int x = v[i], k = i - 1;
        while (k >= lo && v[k] > x) { v[k + 1] = v[k]; k--; }
        v[k + 1] = x;
    }
}

enum op { PUSH, ADD, SUB, MUL, DIV, MOD, DUP, SWAP, DROP, JMP, JZ, JNZ, LT, EQ, LOAD, STORE, CALL, RET, HALT };

long probe_run(const int *code, int len, long *mem, int mem_len, long limit) {
    long stack[256], frames[64];
    int sp = 0, fp = 0, pc = 0;
    long steps = 0;
    while (pc >= 0 && pc < len && steps++ < limit) {
        int op = code[pc++];
        switch (op) {
        case PUSH: if (sp < 256 && pc < len) stack[sp++] = code[pc++]; else return -1; break;
        case ADD: if (sp < 2) return -1; sp--; stack[sp - 1] += stack[sp]; break;
        case SUB: if (sp < 2) return -1; sp--; stack[sp - 1] -= stack[sp]; break;
        case MUL: if (sp < 2) return -1; sp--; stack[sp - 1] *= stack[sp]; break;
        case DIV: if (sp < 2 || stack[sp - 1] == 0) return -1; sp--; stack[sp - 1] /= stack[sp]; break;
        case MOD: if (sp < 2 || stack[sp - 1] == 0) return -1; sp--; stack[sp - 1] %= stack[sp]; break;
        case DUP: if (sp < 1 || sp >= 256) return -1; stack[sp] = stack[sp - 1]; sp++; break;
        case SWAP: if (sp < 2) return -1; { long t = stack[sp - 1]; stack[sp - 1] = stack[sp - 2]; stack[sp - 2] = t; } break;
        case DROP: if (sp < 1) return -1; sp--; break;
        case JMP: if (pc >= len) return -1; pc = code[pc]; break;
        case JZ: if (sp < 1 || pc >= len) return -1; pc = stack[--sp] == 0 ? code[pc] : pc + 1; break;
        case JNZ: if (sp < 1 || pc >= len) return -1; pc = stack[--sp] != 0 ? code[pc] : pc + 1; break;
        case LT: if (sp < 2) return -1; sp--; stack[sp - 1] = stack[sp - 1] < stack[sp]; break;
        case EQ: if (sp < 2) return -1; sp--; stack[sp - 1] = stack[sp - 1] == stack[sp]; break;
        case LOAD: if (sp < 1 || stack[sp - 1] < 0 || stack[sp - 1] >= mem_len) return -1; stack[sp - 1] = mem[stack[sp - 1]]; break;
        case STORE: if (sp < 2 || stack[sp - 1] < 0 || stack[sp - 1] >= mem_len) return -1; mem[stack[sp - 1]] = stack[sp - 2]; sp -= 2; break;
        case CALL: if (fp >= 64 || pc >= len) return -1; frames[fp++] = pc + 1; pc = code[pc]; break;
        case RET: if (fp < 1) return -1; pc = frames[--fp]; break;
        case HALT: return sp > 0 ? stack[sp - 1] : 0;
        default: return -1;
        }
    }
    return -2;
}

struct matrix { int rows, cols; double *v; };

int probe_matmul(const struct matrix *a, const struct matrix *b, struct matrix *out) {
    if (a->cols != b->rows || out->rows != a->rows || out->cols != b->cols) return -1;
    for (int i = 0; i < a->rows; i++)
        for (int j = 0; j < b->cols; j++) {
            double s = 0.0;
            for (int k = 0; k < a->cols; k++) s += a->v[i * a->cols + k] * b->v[k * b->cols + j];
            out->v[i * out->cols + j] = s;
        }
    return 0;
}

int probe_lu(struct matrix *m, int *perm) {
    int n = m->rows;
    if (n != m->cols) return -1;
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int k = 0; k < n; k++) {
        int p = k;
        double best = m->v[k * n + k] < 0 ? -m->v[k * n + k] : m->v[k * n + k];
        for (int i = k + 1; i < n; i++) {
            double a = m->v[i * n + k] < 0 ? -m->v[i * n + k] : m->v[i * n + k];
            if (a > best) { best = a; p = i; }
        }
        if (best == 0.0) return -1;
        if (p != k) {
            for (int j = 0; j < n; j++) { double t = m->v[k * n + j]; m->v[k * n + j] = m->v[p * n + j]; m->v[p * n + j] = t; }
            swap(&perm[k], &perm[p]);
        }
        for (int i = k + 1; i < n; i++) {
            double f = m->v[i * n + k] / m->v[k * n + k];
            m->v[i * n + k] = f;
            for (int j = k + 1; j < n; j++) m->v[i * n + j] -= f * m->v[k * n + j];
        }
    }
    return 0;
}

size_t probe_utf8_count(const unsigned char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        size_t w = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        if (i + w > len) break;
        for (size_t k = 1; k < w; k++)
            if ((s[i + k] & 0xc0) != 0x80) { w = 1; break; }
        i += w;
        n++;
    }
    return n;
}

u32 probe_crc32(const unsigned char *s, size_t len) {
    static u32 table[256];
    static int ready;
    if (!ready) {
        for (u32 i = 0; i < 256; i++) {
            u32 c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    u32 c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) c = table[(c ^ s[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static inline u32 step(u32 a, u32 b, u32 c, u32 d, u32 k, int s) {
    u32 t = a + ((b & c) | (~b & d)) + k;
    return b + ((t << s) | (t >> (32 - s)));
}

void probe_scramble(u32 *state, const u32 *block, int rounds) {
    u32 a = state[0], b = state[1], c = state[2], d = state[3];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 16; i += 4) {
            a = step(a, b, c, d, block[i], 7);
            d = step(d, a, b, c, block[i + 1], 12);
            c = step(c, d, a, b, block[i + 2], 17);
            b = step(b, c, d, a, block[i + 3], 22);
        }
    }
    state[0] += a; state[1] += b; state[2] += c; state[3] += d;
}

long probe_edit_distance(const char *a, int la, const char *b, int lb, int *row) {
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int prev = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int cur = row[j];
            int best = prev + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            prev = cur;
        }
    }
    return row[lb];
}
