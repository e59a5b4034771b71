/*
 * warns.c - compiles, with exactly one -Wall warning: an unused variable.
 *
 * Not part of the build: it exists so that tests can check that a
 * compiler's warnings reach the user unchanged and do not fail the compile.
 */
int sample_extra_answer(int x)
{
    int unused_total = x * 2;
    return x + 40;
}
