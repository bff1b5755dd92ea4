from gpuscout.cli.app import main

main()
