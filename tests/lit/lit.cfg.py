# lit configuration for Kiln's kiln-opt + FileCheck tests.
import os

import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = getattr(config, "kiln_lit_exec_root", config.test_source_root)

# kiln-opt (build dir) and FileCheck/not/count (LLVM 19) first on PATH.
tool_dirs = [getattr(config, "kiln_tools_dir", ""),
             getattr(config, "llvm_tools_dir", "/usr/lib/llvm-19/bin")]
path = os.pathsep.join([d for d in tool_dirs if d] +
                       [config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path

# For op-docs.mlir: mlir-tblgen reads KilnOps.td with kiln's and MLIR's includes.
kiln_source_root = getattr(config, "kiln_source_root",
                           os.path.join(config.test_source_root, "..", ".."))
config.substitutions.append(("%kiln_ir_include", os.path.join(kiln_source_root, "ir", "include")))
config.substitutions.append(("%mlir_include", getattr(config, "mlir_include_dir", "/usr/lib/llvm-19/include")))
