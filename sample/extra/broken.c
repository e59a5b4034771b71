/*
 * broken.c - fails to compile with one error: an undeclared identifier.
 *
 * Not part of the build: it exists so that tests can check that a failed
 * compile's diagnostics and exit status reach the user unchanged. It
 * preprocesses cleanly; only the compiler proper rejects it.
 */
int sample_extra_broken(int x)
{
    return x + missing_value;
}
