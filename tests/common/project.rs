//! A generated multi-file C and C++ project for end-to-end tests: small
//! enough to build in seconds, varied enough to exercise what matters —
//! local headers, system headers, `__FILE__`, a `-D` from the command line,
//! C++ templates and the STL, dependency files, and a program whose output
//! proves every object was linked right.

use std::fmt::Write as _;
use std::path::Path;

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// C translation units.
    pub c: usize,
    /// C++ translation units.
    pub cxx: usize,
}

impl Default for Shape {
    fn default() -> Self {
        Shape { c: 12, cxx: 6 }
    }
}

/// Writes the project into `dir` (which must exist). `make` builds `prog`;
/// `make check` runs it and compares its output with `expected.txt`.
pub fn generate(dir: &Path, shape: Shape) {
    std::fs::create_dir_all(dir.join("src/c")).unwrap();
    std::fs::create_dir_all(dir.join("src/cxx")).unwrap();
    std::fs::create_dir_all(dir.join("include/gen")).unwrap();
    let mut header = String::from("#ifndef GEN_LIB_H\n#define GEN_LIB_H\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n");
    let mut expected = 0u64;
    let mut main_calls = String::new();
    for i in 0..shape.c {
        writeln!(header, "long gen_c{i}(long x);").unwrap();
        let body = format!(
            "#include <stdio.h>\n#include <string.h>\n#include \"gen/lib.h\"\n#include \"local{m}.h\"\n\n\
             static const char *where_{i} = __FILE__;\n\n\
             long gen_c{i}(long x)\n{{\n    long acc = LOCAL_BIAS_{m} + GEN_SALT;\n    for (long k = 0; k < {n}; k++)\n        acc += (x + k) * {mul};\n    \
             return acc + (long)strlen(where_{i}) * 0;\n}}\n",
            m = i % 3,
            n = 3 + i,
            mul = i + 1
        );
        std::fs::write(dir.join(format!("src/c/unit{i}.c")), body).unwrap();
        let x = i as u64;
        let mut acc = (i % 3) as u64 * 10 + 7;
        for k in 0..(3 + x) {
            acc += (x + k) * (x + 1);
        }
        expected = expected.wrapping_add(acc);
        writeln!(main_calls, "    total += gen_c{i}({i});").unwrap();
    }
    for m in 0..3 {
        std::fs::write(
            dir.join(format!("src/c/local{m}.h")),
            format!("#ifndef LOCAL{m}_H\n#define LOCAL{m}_H\n#define LOCAL_BIAS_{m} {}\n#endif\n", m * 10),
        )
        .unwrap();
    }
    for j in 0..shape.cxx {
        writeln!(header, "long gen_cxx{j}(long x);").unwrap();
        let body = format!(
            "#include <algorithm>\n#include <map>\n#include <numeric>\n#include <string>\n#include <vector>\n#include \"gen/lib.h\"\n\n\
             namespace {{\ntemplate <typename T>\nT fold_{j}(const std::vector<T> &v) {{ return std::accumulate(v.begin(), v.end(), T{{}}); }}\n}}\n\n\
             extern \"C\" long gen_cxx{j}(long x)\n{{\n    std::vector<long> v;\n    for (long k = 0; k <= x + {j}; k++) v.push_back(k * {mul});\n    \
             std::map<std::string, long> m;\n    m[std::string(\"unit\") + std::to_string({j})] = fold_{j}(v);\n    \
             std::sort(v.begin(), v.end(), [](long a, long b) {{ return a > b; }});\n    return m.begin()->second + GEN_SALT + v.front() * 0;\n}}\n",
            mul = j + 2
        );
        std::fs::write(dir.join(format!("src/cxx/part{j}.cpp")), body).unwrap();
        let x = j as u64;
        let sum: u64 = (0..=(2 * x)).map(|k| k * (x + 2)).sum();
        expected = expected.wrapping_add(sum + 7);
        writeln!(main_calls, "    total += gen_cxx{j}({j});").unwrap();
    }
    header.push_str("#ifdef __cplusplus\n}\n#endif\n#endif\n");
    std::fs::write(dir.join("include/gen/lib.h"), header).unwrap();
    std::fs::write(
        dir.join("src/main.c"),
        format!("#include <stdio.h>\n#include \"gen/lib.h\"\n\nint main(void)\n{{\n    long total = 0;\n{main_calls}    printf(\"total %ld\\n\", total);\n    return 0;\n}}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("expected.txt"), format!("total {expected}\n")).unwrap();
    std::fs::write(dir.join("Makefile"), MAKEFILE).unwrap();
    std::fs::write(dir.join("CMakeLists.txt"), CMAKELISTS).unwrap();
}

/// Adds `src/c/slow{i}.c` files that each take gcc a few seconds at -O2 (a
/// long generated function), so that tests can catch compiles in flight.
pub fn add_slow_units(dir: &Path, count: usize, statements: usize) {
    for i in 0..count {
        let mut body = format!("long gen_slow{i}(long x)\n{{\n    long a = x, b = x + 1, c = x + 2;\n");
        for k in 0..statements {
            writeln!(
                body,
                "    a = (a * {m} + b) ^ (c >> {s}); b = (b + a * {k}) % 1000003; c = c * 31 + a - b;",
                m = k % 7 + 3,
                s = k % 5 + 1
            )
            .unwrap();
        }
        body.push_str("    return a + b + c;\n}\n");
        std::fs::write(dir.join(format!("src/c/slow{i}.c")), body).unwrap();
    }
}

const CMAKELISTS: &str = r#"cmake_minimum_required(VERSION 3.13)
project(gen C CXX)
file(GLOB C_SRCS src/c/*.c)
file(GLOB CXX_SRCS src/cxx/*.cpp)
add_executable(prog ${C_SRCS} ${CXX_SRCS} src/main.c)
target_include_directories(prog PRIVATE include)
target_compile_definitions(prog PRIVATE GEN_SALT=7)
"#;

const MAKEFILE: &str = r#"# Generated by ccroute's tests.
CC ?= gcc
CXX ?= g++
CFLAGS ?= -O2 -Wall
CXXFLAGS ?= -O2 -Wall
CPPFLAGS += -Iinclude -DGEN_SALT=7
BUILD ?= build

C_SRCS := $(wildcard src/c/*.c) src/main.c
CXX_SRCS := $(wildcard src/cxx/*.cpp)
OBJS := $(C_SRCS:%.c=$(BUILD)/%.o) $(CXX_SRCS:%.cpp=$(BUILD)/%.o)

all: $(BUILD)/prog

$(BUILD)/prog: $(OBJS)
	$(CXX) -o $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -MMD -MP -c $< -o $@

check: $(BUILD)/prog
	./$(BUILD)/prog > $(BUILD)/out.txt
	cmp $(BUILD)/out.txt expected.txt

clean:
	rm -rf $(BUILD)

-include $(OBJS:.o=.d)
.PHONY: all check clean
"#;
